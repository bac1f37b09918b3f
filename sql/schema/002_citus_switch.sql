-- 002_citus_switch.sql: on Citus, the database setting queen.citus follows
-- where the log tables live, before any later file reads it.
--
-- 020_citus.sql distributes the tables and sets queen.citus = 'on' on the
-- database (ALTER DATABASE ... SET). That setting is the database's, not
-- its contents': a database created from a distributed one as template, or
-- restored from a dump without --create, holds distributed tables and no
-- setting. 010_figures.sql would then create triggers on distributed tables
-- (which Citus refuses, and the boot failed), and the procedures would take
-- the statement shapes Citus cannot plan. So when queen.log_partitions is
-- distributed and the setting is not 'on', it is set again, for the
-- database and for this transaction. An 'off' there is overridden with a
-- warning: on distributed tables only the Citus shapes work.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')
       OR current_setting('queen.citus', true) IS NOT DISTINCT FROM 'on' THEN
        RETURN;
    END IF;
    -- (pg_dist_partition is Citus's: asked only now.)
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition
                    WHERE logicalrelid = 'queen.log_partitions'::regclass) THEN
        RETURN;
    END IF;
    IF current_setting('queen.citus', true) = 'off' THEN
        RAISE WARNING 'queen on citus: queen.citus = ''off'' is ignored: the log tables are distributed';
    END IF;
    EXECUTE format('ALTER DATABASE %I SET queen.citus = %L', current_database(), 'on');
    PERFORM set_config('queen.citus', 'on', true);
END
$$;
