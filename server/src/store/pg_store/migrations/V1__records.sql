-- Every record of every kind, one row each: the PostgreSQL form of the
-- store's `Record` (see `pg_store`). Indexed for the store's reads: by id, by
-- unique name, by creation or update time within a scope (both directions
-- read the same index), and by the ids a record refers to.
CREATE TABLE records (
    tenant         uuid        NOT NULL,
    kind           smallint    NOT NULL,
    id             uuid        NOT NULL,
    scope          uuid        NOT NULL,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    version        bigint      NOT NULL,
    -- The unique name as its UTF-8 bytes (text cannot hold a NUL, a name can),
    -- and its SHA-256, which the unique index holds: a name of any length fits.
    unique_name    bytea,
    unique_key     bytea,
    refs           uuid[]      NOT NULL DEFAULT '{}',
    -- The metadata and kind-specific fields as JSON text, exactly as written
    -- (jsonb would reorder keys and refuse some strings).
    metadata       text,
    data           text        NOT NULL,
    -- The metadata again as jsonb, only to narrow a metadata filter with
    -- `@>`; integral floats are written as integers there, so that `@>`
    -- compares numbers as the filter does. NULL when it cannot be jsonb (a
    -- string holding \u0000): such rows are always candidates, and the exact
    -- match is decided by the server.
    metadata_index jsonb,
    PRIMARY KEY (tenant, kind, id)
);

CREATE UNIQUE INDEX records_unique_name ON records (tenant, kind, scope, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX records_by_created ON records (tenant, kind, scope, created_at, id);
CREATE INDEX records_by_updated ON records (tenant, kind, scope, updated_at, id);
CREATE INDEX records_refs ON records USING gin (refs);
