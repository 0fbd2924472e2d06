from django.contrib import admin
from django.urls import include, path

from webapp.views import favicon, healthz

handler400 = "webapp.views.bad_request"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    path("", include("dashboard.urls")),
]
