-- What a host's agent says of the creates it is running (issue #38): how many VM creates
-- (and restores and forks) it has under way now, reported at join and with every heartbeat,
-- for operators (`GET /v1/hosts`). Placement does not read it: it counts creates in flight
-- from the store (a create's row is `starting` until its VM runs). Portable SQL.
ALTER TABLE hosts ADD COLUMN creates_in_flight BIGINT NOT NULL DEFAULT 0;
