from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0018_sample_policy_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='sample',
            name='reward_components',
            field=models.JSONField(help_text="Each reward component's score by name (the run's rewards); a component that failed is null, its error in verifier_error; null: the verifier alone.", null=True),
        ),
    ]
