from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0013_request_log_rerank_outcome"),
    ]

    operations = [
        migrations.AddField(
            model_name="gatewaykey",
            name="filters",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
    ]
