-- A read-only role for the query API and analysts (psql variables: reader, reader_password, owner, db).
--
-- Why: the query API only reads; giving it a role that cannot write means a bug or a leaked
-- credential there cannot change a decision. The tables do not exist yet when this runs (the
-- `migrate` service creates them), so default privileges grant SELECT on whatever the owner creates
-- later, views and alembic_version included.
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'reader', :'reader_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'reader') \gexec
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
