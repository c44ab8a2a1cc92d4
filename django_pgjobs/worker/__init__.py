from .loop import Worker, WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
