from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

app_name = "dashboard"
urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html",
                                                 redirect_authenticated_user=True),
         name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.run_list, name="run_list"),
    path("runs/new/", views.run_launch, name="run_launch"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/status/", views.run_status, name="run_status"),
    path("runs/<int:run_id>/charts/<slug:name>.json", views.run_chart, name="run_chart"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/export/", views.run_export, name="run_export"),
    path("runs/<int:run_id>/delete/", views.run_delete, name="run_delete"),
    path("runs/<int:run_id>/relaunch/", views.run_relaunch, name="run_relaunch"),
    path("runs/<int:run_id>/retry/", views.run_retry, name="run_retry"),
    path("runs/<int:run_id>/estimate/", views.run_estimate, name="run_estimate"),
    path("runs/<int:run_id>/prompts/<int:prompt_id>/", views.prompt_history,
         name="prompt_history"),
    path("runs/<int:run_id>/prompts/<int:prompt_id>/chart.json", views.prompt_chart,
         name="prompt_chart"),
    path("sweeps/<int:sweep_id>/cancel/", views.sweep_cancel, name="sweep_cancel"),
    path("prompt-sets/", views.prompt_sets, name="prompt_sets"),
    path("prompt-sets/<int:set_id>/", views.prompt_set_detail, name="prompt_set_detail"),
    path("estimates/<int:estimate_id>/", views.estimate_detail, name="estimate_detail"),
    path("estimates/<int:estimate_id>/panel/", views.estimate_panel, name="estimate_panel"),
    path("estimates/<int:estimate_id>/charts/<slug:name>.json", views.estimate_chart,
         name="estimate_chart"),
    path("estimates/<int:estimate_id>/cancel/", views.estimate_cancel, name="estimate_cancel"),
    path("estimates/<int:estimate_id>/again/", views.estimate_again, name="estimate_again"),
    path("compare/", views.compare, name="compare"),
    path("compare/chart.json", views.compare_chart, name="compare_chart"),
    path("compare/scatter.json", views.compare_scatter, name="compare_scatter"),
    path("report/", views.report, name="report"),
    path("report/<slug:name>.json", views.report_figure, name="report_figure"),
    path("report/<slug:name>.csv", views.report_csv, name="report_csv"),
]
