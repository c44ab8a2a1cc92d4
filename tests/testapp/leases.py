"""What the tests do to a job's lease from outside its worker."""

from django.db import connections


def steal_lease(job_id: int) -> None:
    """Give the job a new lease token on a connection of its own, as a second worker or the
    reaper taking the job over would: the running worker's lease is lost from then on."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute(
                "UPDATE pgjobs_job SET lease_token = gen_random_uuid() WHERE id = %s", [job_id]
            )
    finally:
        other.close()
