from django.db import migrations, models


class Migration(migrations.Migration):
    """Each audit entry keeps the address of the client whose request caused it (empty for the
    rows written before, and for those the CLI or a worker writes)."""

    dependencies = [
        ("ragmux", "0002_audit_entries"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="client_address",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
