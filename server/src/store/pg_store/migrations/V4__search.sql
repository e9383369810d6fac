-- Search in the database: one row per snippet of every document (records of
-- kind 9), written in the transaction that writes the document, with the
-- terms the server's analysis found (the same analysis as the embedded
-- store's: Unicode words, case and accent folding, English stemming). The
-- tsvector holds them for the GIN index that finds the snippets holding a
-- query's terms; `terms` and `tfs` hold each distinct term's frequency, for
-- BM25. `embedding` is the snippet's vector scaled to unit length, NULL when
-- it has none.
CREATE TABLE search_snippets (
    tenant    uuid     NOT NULL,
    doc       uuid     NOT NULL,
    idx       integer  NOT NULL,
    owner     uuid     NOT NULL,
    len       integer  NOT NULL,
    terms     text[]   NOT NULL,
    tfs       integer[] NOT NULL,
    tsv       tsvector NOT NULL,
    embedding real[],
    PRIMARY KEY (tenant, doc, idx)
);

CREATE INDEX search_snippets_owner ON search_snippets (tenant, owner, doc, idx);
CREATE INDEX search_snippets_terms ON search_snippets USING gin (tsv);

-- Per owner, BM25's corpus statistics (snippets and their total length) and
-- the dimension of its vectors (NULL while it has none), kept by the same
-- transactions as the snippets.
CREATE TABLE search_owners (
    tenant    uuid    NOT NULL,
    owner     uuid    NOT NULL,
    snippets  bigint  NOT NULL,
    total_len bigint  NOT NULL,
    vectors   bigint  NOT NULL,
    dim       integer,
    PRIMARY KEY (tenant, owner)
);

-- Per owner and term, how many of its snippets hold the term (BM25's
-- document frequency), kept by the same transactions as the snippets.
CREATE TABLE search_terms (
    tenant uuid   NOT NULL,
    owner  uuid   NOT NULL,
    term   text   NOT NULL,
    df     bigint NOT NULL,
    PRIMARY KEY (tenant, owner, term)
);

-- Documents written before this migration, indexed by the first server that
-- starts on it (then removed from here).
CREATE TABLE search_backfill (
    tenant uuid NOT NULL,
    doc    uuid NOT NULL,
    PRIMARY KEY (tenant, doc)
);
INSERT INTO search_backfill (tenant, doc) SELECT tenant, id FROM records WHERE kind = 9;
