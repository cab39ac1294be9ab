from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("clients", "0008_project_routes"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="route_name",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="target",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="attempts",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
