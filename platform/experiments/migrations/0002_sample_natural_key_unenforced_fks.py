# The sample table is rebuilt with its natural key as primary key and without database-enforced
# foreign keys (see Sample's docstring: the recorder's COPY rate). Django cannot turn an existing
# single-column key into a composite one, so the table is recreated; no data exists yet beyond
# development databases. Prompt-steps lose their database-enforced foreign keys too.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("experiments", "0001_initial"),
    ]

    operations = [
        migrations.DeleteModel(name="Sample"),
        migrations.CreateModel(
            name="Sample",
            fields=[
                ("pk", models.CompositePrimaryKey("run", "prompt", "step", "index", blank=True,
                                                  editable=False, primary_key=True,
                                                  serialize=False)),
                ("step", models.PositiveIntegerField()),
                ("index", models.PositiveSmallIntegerField(
                    help_text="Position in the prompt's pool this step.")),
                ("round", models.PositiveSmallIntegerField()),
                ("response", models.TextField(
                    help_text="None when the retention policy dropped it.", null=True)),
                ("tokens", models.PositiveIntegerField()),
                ("reward", models.FloatField()),
                ("kept", models.BooleanField()),
                ("advantage", models.FloatField(null=True)),
                ("verifier_error", models.TextField(blank=True)),
                ("prompt", models.ForeignKey(db_constraint=False, db_index=False,
                                             on_delete=django.db.models.deletion.CASCADE,
                                             to="experiments.prompt")),
                ("run", models.ForeignKey(db_constraint=False, db_index=False,
                                          on_delete=django.db.models.deletion.CASCADE,
                                          related_name="samples", to="experiments.run")),
            ],
            options={"ordering": ["run", "step", "prompt", "index"]},
        ),
        migrations.AlterField(
            model_name="promptstep",
            name="run",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    related_name="prompt_steps", to="experiments.run"),
        ),
        migrations.AlterField(
            model_name="promptstep",
            name="prompt",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    to="experiments.prompt"),
        ),
    ]
