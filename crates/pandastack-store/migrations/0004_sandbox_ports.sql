-- Preview URLs: each sandbox has an access token for its private ports, and a set of ports
-- made public (TEXT JSON array of port numbers). Rows from before get an empty token, which the
-- API replaces with a new one on first use.
ALTER TABLE sandboxes ADD COLUMN access_token TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN public_ports TEXT NOT NULL DEFAULT '[]';
