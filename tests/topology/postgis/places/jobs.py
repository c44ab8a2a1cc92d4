"""The GeoDjango project's handler: a spatial query (PostGIS) and a spatial write (GEOS)."""

from django_pgjobs import handler

from .models import Place


@handler("places.buffer")
def buffer(job):
    """Store a 0.01° buffer around the place as its area; count the places within 0.1°."""
    place = Place.objects.get(pk=job.config["place"])
    place.area = place.location.buffer(0.01)
    place.save(update_fields=["area"])
    return {"near": Place.objects.filter(location__dwithin=(place.location, 0.1)).count()}
