-- The executions under way and their leases, across tenants: what every
-- server looks through every third of `executions.lease_s` to take over the
-- executions of a server that died. Without this index that look reads the
-- whole table; with it, only these rows (a partial index: nothing else pays).
-- 14: Kind::ActiveExecution, 15: Kind::ExecutionLease.
CREATE INDEX records_execution_claims ON records (kind, tenant, id) WHERE kind IN (14, 15);
