# Joins the two 0016 leaves (issue 44a's files and vector stores, issue 46's query_rewrite) that
# meet on this branch; drop it when the lead renumbers one of them after the other.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0016_files_and_vector_stores"),
        ("clients", "0016_project_query_rewrite"),
    ]

    operations = []
