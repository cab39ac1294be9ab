from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clients', '0004_request_log_rag_skipped_reason'),
    ]

    operations = [
        migrations.AddField(
            model_name='gatewaykey',
            name='budget_daily_tokens',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='gatewaykey',
            name='budget_daily_usd_micros',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='gatewaykey',
            name='budget_monthly_tokens',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='gatewaykey',
            name='budget_monthly_usd_micros',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='gatewaykey',
            name='rate_limit_rpm',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='gatewaykey',
            name='rate_limit_tpm',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='budget_daily_tokens',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='budget_daily_usd_micros',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='budget_monthly_tokens',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='budget_monthly_usd_micros',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='rate_limit_rpm',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='project',
            name='rate_limit_tpm',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
