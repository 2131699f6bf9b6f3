-- Where the other replicas reach a lease's holder (its peerUrl): followers forward the
-- LOAD_BALANCER requests they get to the leader there. '' = it published none.
ALTER TABLE gantry_leases ADD COLUMN address text NOT NULL DEFAULT '';
