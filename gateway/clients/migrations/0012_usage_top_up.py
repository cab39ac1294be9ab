from pathlib import Path

from django.db import migrations

# ragmux_usage_admit as it is now (issue 41 added p_requests, for a top-up that takes no request
# slot, and held_tokens / held_micros to each call's answer): its source is
# gateway/clients/usage_admit.sql, beside the code that calls it.
USAGE_ADMIT = (Path(__file__).resolve().parents[1] / "usage_admit.sql").read_text()
ADMIT_SIGNATURE = (
    "bigint, text[], timestamptz[], bigint[], int[], bigint[], bigint[], int[], text[], text[], text[], bigint[], "
    "bigint[]"
)
# The signature 0011 created the function with (on a database that applied it before 0011 stopped
# creating it: see there).
FIRST_ADMIT_SIGNATURE = (
    "bigint, text[], timestamptz[], bigint[], bigint[], bigint[], int[], text[], text[], text[], bigint[], bigint[]"
)


class Migration(migrations.Migration):

    dependencies = [
        ('clients', '0011_usage_batch_admission'),
    ]

    operations = [
        migrations.RunSQL(f"DROP FUNCTION IF EXISTS ragmux_usage_admit({FIRST_ADMIT_SIGNATURE})", migrations.RunSQL.noop),
        migrations.RunSQL(USAGE_ADMIT, f"DROP FUNCTION ragmux_usage_admit({ADMIT_SIGNATURE})"),
    ]
