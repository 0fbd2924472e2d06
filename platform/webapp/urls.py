from api.api import urls as api_urls
from api.views import account, revoke
from django.contrib import admin
from django.urls import include, path

from webapp.views import favicon, healthz

handler400 = "webapp.views.bad_request"
handler500 = "webapp.views.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    path("api/v1/", api_urls()),
    path("account/", account, name="account"),
    path("account/tokens/<int:token_id>/revoke/", revoke, name="account_token_revoke"),
    path("", include("dashboard.urls")),
]
