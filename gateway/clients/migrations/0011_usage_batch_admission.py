from importlib import import_module

from django.db import migrations

# Admission in batches (gateway.clients.limiter) replaced ragmux_usage_reserve with
# ragmux_usage_admit. This migration created that function's first version, which 0012 replaced
# at once; it no longer does, so that the function's source stands in one place
# (gateway/clients/usage_admit.sql, loaded by 0012). A database that applied it earlier holds the
# first version until 0012 drops it, so every migrated database ends with the same function.
RESERVE_SIGNATURE = "bigint, bigint, text[], timestamptz[], bigint, bigint, text[], text[], text[], bigint[], bigint[]"


class Migration(migrations.Migration):

    dependencies = [
        ('clients', '0010_request_log_rerank'),
    ]

    operations = [
        # Replaced by ragmux_usage_admit (a batch of one is the same admission).
        migrations.RunSQL(
            f"DROP FUNCTION ragmux_usage_reserve({RESERVE_SIGNATURE})",
            import_module("gateway.clients.migrations.0007_usage_counters").USAGE_RESERVE,
        ),
    ]
