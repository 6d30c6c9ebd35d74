-- An app's SSH deploy key (issue #17): the private half of an ed25519 key pair in OpenSSH's
-- format, made by the server when the app is created; the API shows only the public half (the
-- app's `deploy_key`, derived from this). Apps made before this column have NULL here: the
-- server makes their key the first time it reads the row. Portable SQL.
ALTER TABLE apps ADD COLUMN deploy_private_key TEXT;
