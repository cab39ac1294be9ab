# Loads the Celery app with Django so shared tasks use ragmux's broker settings.
from ragmux.celery import app as celery_app

__all__ = ["celery_app"]
