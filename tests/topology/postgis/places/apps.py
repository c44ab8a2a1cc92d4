from django.apps import AppConfig


class PlacesConfig(AppConfig):
    name = "tests.topology.postgis.places"
    label = "places"
    default_auto_field = "django.db.models.BigAutoField"
