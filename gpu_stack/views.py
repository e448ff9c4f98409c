"""The GPU stack page (platform admins; anyone else gets 404): the GPU Operator's state, each
GPU node as it sees it, and the MIG layout change — pick nodes and a layout, preview what it
does to capacity and which jobs it moves, confirm (docs/gpu-operator.md)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from cluster.models import GpuChange
from core.errors import ApplicationError
from gpu_stack.selectors.changes import mig_preview
from gpu_stack.selectors.page import gpu_stack_get
from gpu_stack.services import gpu_change_start, plugin_config_assign, plugin_config_save


def _admin(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User) or not user.is_superuser:
        raise Http404("No such page.")
    return user


@login_required
@require_http_methods(["GET"])
def gpu_stack(request: HttpRequest) -> HttpResponse:
    _admin(request)
    context = {"stack": gpu_stack_get(), "displace_choices": GpuChange.Displace.choices}
    htmx = getattr(request, "htmx", None)
    if htmx and getattr(htmx, "target", None) == "gpu-stack":
        return render(request, "gpu_stack/_gpu_stack.html", context)
    return render(request, "gpu_stack/gpu_stack.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def mig_change(request: HttpRequest) -> HttpResponse:
    """GET: the preview of ``layout`` on each of ``nodes``; POST: start the changes."""
    admin = _admin(request)
    params = request.POST if request.method == "POST" else request.GET
    nodes = [n for n in params.getlist("nodes") if n]
    layout = params.get("layout", "")
    if not nodes or not layout:
        messages.error(request, "Pick at least one node and a layout.")
        return redirect("gpu-stack")
    if request.method == "GET":
        previews = []
        for node in nodes:
            try:
                previews.append(mig_preview(node=node, layout=layout))
            except ApplicationError as exc:
                messages.error(request, f"{node}: {exc.message}")
        context = {
            "layout": layout,
            "previews": previews,
            "can_apply": any(not p.problem for p in previews),
            "displace_choices": GpuChange.Displace.choices,
        }
        return render(request, "gpu_stack/mig_preview.html", context)
    displace = params.get("displace", GpuChange.Displace.EVICT)
    for node in nodes:
        try:
            gpu_change_start(actor=admin, node=node, layout=layout, displace=displace)
        except ApplicationError as exc:
            messages.error(request, f"{node}: {exc.message}")
        else:
            messages.success(request, f"{node}: re-partitioning as {layout} started.")
    return redirect("gpu-stack")


@login_required
@require_http_methods(["POST"])
def device_plugin_config(request: HttpRequest) -> HttpResponse:
    """Save a named device plugin config (replicas, rename); its nodes restart with it."""
    admin = _admin(request)
    name = request.POST.get("name", "").strip()
    try:
        replicas = int(request.POST.get("replicas", ""))
    except ValueError:
        messages.error(request, "replicas: a whole number, 1 (no sharing) or more.")
        return redirect("gpu-stack")
    rename = request.POST.get("rename_by_default") == "on"
    try:
        changes = plugin_config_save(
            actor=admin, name=name, replicas=replicas, rename_by_default=rename
        )
    except ApplicationError as exc:
        messages.error(request, f"{name}: {exc.message}")
    else:
        nodes = ", ".join(c.node for c in changes) or "no node runs it yet"
        messages.success(request, f"{name}: {replicas} replicas saved ({nodes}).")
    return redirect("gpu-stack")


@login_required
@require_http_methods(["POST"])
def device_plugin_assign(request: HttpRequest) -> HttpResponse:
    """Make a node's device plugin run another named config."""
    admin = _admin(request)
    node, config = request.POST.get("node", ""), request.POST.get("config", "")
    try:
        plugin_config_assign(actor=admin, node=node, config=config)
    except ApplicationError as exc:
        messages.error(request, f"{node}: {exc.message}")
    else:
        messages.success(request, f"{node}: its device plugin restarts with {config}.")
    return redirect("gpu-stack")
