-- A sandbox's disk limits as its VM runs with them (MiB/s and I/O operations per second, reads
-- and writes together; 0: unlimited). Rows made before this column read 0 for both until their
-- VM reports its limits again. Portable SQL.
ALTER TABLE sandboxes ADD COLUMN disk_mbps BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN disk_iops BIGINT NOT NULL DEFAULT 0;
