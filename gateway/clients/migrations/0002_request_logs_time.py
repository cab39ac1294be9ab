from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0001_initial"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="requestlog",
            index=models.Index(fields=["created_at"], name="request_logs_time"),
        ),
    ]
