# The sample key's column order becomes (run, step, prompt, index): see Sample's docstring. Rows
# are kept: only the primary-key constraint is rebuilt (Django cannot alter a composite key, so
# the model state is redeclared beside the SQL).

import django.db.models.deletion
from django.db import migrations, models

FIELDS = [
    ("step", models.PositiveIntegerField()),
    ("index", models.PositiveSmallIntegerField(
        help_text="Position in the prompt's pool this step.")),
    ("round", models.PositiveSmallIntegerField()),
    ("response", models.TextField(help_text="None when the retention policy dropped it.",
                                  null=True)),
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
]


def _key(*columns: str) -> models.CompositePrimaryKey:
    return models.CompositePrimaryKey(*columns, blank=True, editable=False, primary_key=True,
                                      serialize=False)


class Migration(migrations.Migration):

    dependencies = [
        ("experiments", "0002_sample_natural_key_unenforced_fks"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE experiments_sample DROP CONSTRAINT experiments_sample_pkey, '
                    'ADD PRIMARY KEY (run_id, step, prompt_id, "index")',
                    reverse_sql='ALTER TABLE experiments_sample DROP CONSTRAINT '
                                'experiments_sample_pkey, '
                                'ADD PRIMARY KEY (run_id, prompt_id, step, "index")'),
            ],
            state_operations=[
                migrations.DeleteModel(name="Sample"),
                migrations.CreateModel(
                    name="Sample",
                    fields=[("pk", _key("run", "step", "prompt", "index")), *FIELDS],
                    options={"ordering": ["run", "step", "prompt", "index"]},
                ),
            ],
        ),
    ]
