"""Producer for procrastinate: sync defer (one job per transaction) and batch_defer."""

import clientlib
from procrastinate_app import app, noop


def enqueue_one(i: int) -> None:
    noop.defer(i=i)


def enqueue_many(seqs: list[int]) -> None:
    noop.batch_defer(*({"i": i} for i in seqs))


if __name__ == "__main__":
    with app.open():
        clientlib.main(enqueue_one, enqueue_many)
