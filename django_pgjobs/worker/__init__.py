from .loop import Worker
from .options import WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
