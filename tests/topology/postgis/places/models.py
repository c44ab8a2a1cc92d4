from django.contrib.gis.db import models


class Place(models.Model):
    """A spatial row written in the same transaction as a job; the job computes its reach."""

    name = models.CharField(max_length=100)
    location = models.PointField(srid=4326)
    area = models.PolygonField(srid=4326, null=True)
