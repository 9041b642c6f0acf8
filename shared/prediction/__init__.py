"""Runtime prediction: a job's runtime from what is known when it is submitted.

Why a package of its own: schedulers that order or backfill by runtime (SJF, WFP3, UNICEP, F1,
EASY) are only as good as the runtimes they are given, and a trace rarely has good ones: Philly,
openb and Lublin-256 have no user estimates, HPC2N's are poor. ``predict_runtimes`` learns them
online from the trace itself without ever seeing a job before its logged finish
(``predictor`` module docstring), and ``history`` holds the per-submitter statistics both the
predictor and the older ``history`` estimate (``shared.traces.estimates``) use.

Layer: data (1), beside ``shared.traces``, which uses it for ``--estimates predicted``; it imports
only the domain model and the settings (and scikit-learn), never the traces package. ``cache``
keeps each trace's predictions on disk, keyed by a hash of the predictor's inputs. ``online``
runs the same model on a live cluster (``OnlinePredictor``: fed snapshots' pending jobs and their
outcomes; the featurizer service uses it).
"""

from shared.prediction.attach import attach_predictions, has_predictions
from shared.prediction.features import Features, submission_features
from shared.prediction.history import history_estimate, logged_finish, recent_finished
from shared.prediction.predictor import (
    SOURCES,
    PredictionError,
    PredictorSettings,
    RuntimePredictions,
    fit_schedule,
    predict_runtimes,
)

__all__ = [
    "SOURCES",
    "Features",
    "PredictionError",
    "PredictorSettings",
    "RuntimePredictions",
    "attach_predictions",
    "fit_schedule",
    "has_predictions",
    "history_estimate",
    "logged_finish",
    "predict_runtimes",
    "recent_finished",
    "submission_features",
]
