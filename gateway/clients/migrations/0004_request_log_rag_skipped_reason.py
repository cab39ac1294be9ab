from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0003_request_log_sources"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="rag_skipped_reason",
            field=models.CharField(blank=True, default="", max_length=512),
        ),
    ]
