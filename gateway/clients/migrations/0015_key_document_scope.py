from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0014_stored_responses"),
    ]

    operations = [
        migrations.AddField(
            model_name="gatewaykey",
            name="filters",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
    ]
