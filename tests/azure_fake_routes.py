"""Request routing of the ARM fake (tests/azure_fake.py): resource groups, provider
resources, VM actions. Called with the fake's lock held."""

from __future__ import annotations

import re
import uuid
from typing import Any

_RG = re.compile(r"^/subscriptions/([^/]+)/resourcegroups(?:/([^/]+))?/?$", re.I)
_RES = re.compile(r"^/subscriptions/([^/]+)/resourcegroups/([^/]+)/providers/([^/]+)/([^/]+)"
                  r"(?:/([^/]+))?(?:/([^/]+))?/?$", re.I)


def route(fake: Any, h: Any, method: str, path: str, query: dict[str, str],
          body: dict[str, Any], op_error: dict[str, Any] | None) -> None:
    if re.match(r"^/subscriptions/[^/]+/providers/Microsoft.Compute/skus$", path, re.I):
        loc = re.match(r"location eq '([^']+)'", query.get("$filter", ""))
        items = [s for s in fake.skus
                 if loc is None or loc.group(1) in (s.get("locations") or [])]
        return h._send(200, {"value": items})
    m = _RG.match(path)
    if m:
        return _groups(fake, h, method, m.group(1), m.group(2), query, body)
    m = _RES.match(path)
    if not m:
        return h._error(404, "InvalidResourceType", f"fake ARM: no route for {path}")
    sub, group, ns, rtype, name, action = m.groups()
    g = fake.groups.get(group.lower())
    if g is None or g["properties"]["provisioningState"] == "Deleting" and method == "PUT":
        if g is None:
            return h._error(404, "ResourceGroupNotFound",
                            f"Resource group '{group}' could not be found.")
        return h._error(409, "ResourceGroupBeingDeleted",
                        f"The resource group '{group}' is in deprovisioning state.")
    gname = g["name"]
    rtype_l = rtype.lower()
    if name is None:
        if method != "GET":
            return h._error(405, "MethodNotAllowed", "collection supports GET only")
        prefix = f"{group}/{ns}/{rtype}/".lower()
        items = [_public(r) for k, r in sorted(fake.resources.items())
                 if k.startswith(prefix) and k.count("/") == 3]
        return h._send(200, {"value": items})
    key = f"{group}/{ns}/{rtype}/{name}".lower()
    rid = f"/subscriptions/{sub}/resourceGroups/{gname}/providers/{ns}/{rtype}/{name}"
    res = fake.resources.get(key)
    if action is not None:
        return _action(fake, h, method, key, res, action, query, op_error)
    if method == "GET":
        if res is None:
            return h._error(404, "ResourceNotFound",
                            f"The Resource '{ns}/{rtype}/{name}' under resource group "
                            f"'{gname}' was not found.")
        out = _public(res)
        if rtype_l == "virtualmachines" and query.get("$expand") == "instanceView":
            out["properties"]["instanceView"] = _instance_view(res)
        return h._send(200, out)
    if method == "DELETE":
        if res is None:
            return h._send(204)
        url = fake._new_op(lambda: fake._delete_key(key))
        return h._send(202, None, {"Azure-AsyncOperation": url, "Location": url})
    if method == "PUT":
        return _put(fake, h, key, rid, ns, rtype_l, name, res, body, op_error)
    return h._error(405, "MethodNotAllowed", method)


def _public(res: dict[str, Any]) -> dict[str, Any]:
    import copy

    return {k: copy.deepcopy(v) for k, v in res.items() if not k.startswith("_")}


def _instance_view(vm: dict[str, Any]) -> dict[str, Any]:
    prov = vm["properties"]["provisioningState"].lower()
    statuses = [{"code": f"ProvisioningState/{prov}", "level": "Info",
                 "displayStatus": f"Provisioning {prov}"}]
    power = vm.get("_power")
    if power:
        statuses.append({"code": f"PowerState/{power}", "level": "Info",
                         "displayStatus": f"VM {power}"})
    return {"statuses": statuses}


def _groups(fake: Any, h: Any, method: str, sub: str, name: str | None,
            query: dict[str, str], body: dict[str, Any]) -> None:
    if name is None:
        items = list(fake.groups.values())
        flt = query.get("$filter", "")
        m = re.match(r"tagName eq '([^']+)'(?: and tagValue eq '([^']*)')?", flt)
        if m:
            items = [g for g in items if m.group(1) in (g.get("tags") or {})
                     and (m.group(2) is None or g["tags"][m.group(1)] == m.group(2))]
        return h._send(200, {"value": [_public(g) for g in items]})
    key = name.lower()
    g = fake.groups.get(key)
    if method in ("GET", "HEAD"):
        if g is None:
            return h._error(404, "ResourceGroupNotFound",
                            f"Resource group '{name}' could not be found.")
        return h._send(200 if method == "GET" else 204, _public(g) if method == "GET" else None)
    if method == "PUT":
        if g is not None and g["properties"]["provisioningState"] == "Deleting":
            return h._error(409, "ResourceGroupBeingDeleted",
                            f"The resource group '{name}' is in deprovisioning state.")
        new = {"id": f"/subscriptions/{sub}/resourceGroups/{name}", "name": name,
               "type": "Microsoft.Resources/resourceGroups", "location": body["location"],
               "tags": body.get("tags") or {}, "properties": {"provisioningState": "Succeeded"}}
        fake.groups[key] = new
        return h._send(200 if g is not None else 201, _public(new))
    if method == "DELETE":
        if g is None:  # ARM: deleting a group that does not exist is a 404
            return h._error(404, "ResourceGroupNotFound",
                            f"Resource group '{name}' could not be found.")
        g["properties"]["provisioningState"] = "Deleting"

        def done() -> None:
            for k in [k for k in fake.resources if k.startswith(key + "/")]:
                fake._delete_key(k)
            fake.groups.pop(key, None)

        url = fake._new_op(done, location_style=True)
        return h._send(202, None, {"Location": url, "Retry-After": "0"})
    return h._error(405, "MethodNotAllowed", method)


def _put(fake: Any, h: Any, key: str, rid: str, ns: str, rtype: str, name: str,
         old: dict[str, Any] | None, body: dict[str, Any], op_error: dict[str, Any] | None) -> None:
    res = {**body, "id": rid, "name": name, "type": f"{ns}/{rtype}"}
    props = dict(body.get("properties") or {})
    res["properties"] = props
    if rtype == "virtualnetworks":
        for s in props.get("subnets") or []:
            s["id"] = f"{rid}/subnets/{s['name']}"
            s.setdefault("properties", {})["provisioningState"] = "Succeeded"
    elif rtype == "publicipaddresses":
        props["ipAddress"] = (old or {}).get("properties", {}).get("ipAddress") or \
            f"203.0.113.{fake.public_next}"
        fake.public_next += 1
    elif rtype == "networkinterfaces":
        ipc = props["ipConfigurations"][0]
        ipc["id"] = f"{rid}/ipConfigurations/{ipc['name']}"
        p = ipc.setdefault("properties", {})
        if old is not None:
            p["privateIPAddress"] = old["properties"]["ipConfigurations"][0]["properties"][
                "privateIPAddress"]
        else:
            subnet = _find_subnet(fake, p["subnet"]["id"])
            if subnet is None:
                return h._error(400, "InvalidResourceReference",
                                f"Resource {p['subnet']['id']} referenced by resource {rid} "
                                "was not found.")
            ip = fake._allocate_ip(subnet["properties"]["addressPrefix"])
            if ip is None:
                return h._error(400, "SubnetIsFull" if subnet else "InvalidParameter",
                                "fake ARM: no free address inside the lab's subnet in "
                                f"{subnet['properties']['addressPrefix']}")
            p["privateIPAddress"] = ip
        p["privateIPAllocationMethod"] = "Dynamic"
    elif rtype == "virtualmachines":
        nic_id = props["networkProfile"]["networkInterfaces"][0]["id"]
        if fake._key_of(nic_id) not in fake.resources:
            return h._error(400, "InvalidResourceReference",
                            f"Resource {nic_id} referenced by resource {rid} was not found.")
        props["vmId"] = str(uuid.uuid4())
        res["_power"] = "starting"
    if rtype not in {"networksecuritygroups", "virtualnetworks", "publicipaddresses",
                     "networkinterfaces", "virtualmachines"}:
        props["provisioningState"] = "Succeeded"
        fake.resources[key] = res
        return h._send(200 if old else 201, _public(res))
    props["provisioningState"] = "Updating" if old else "Creating"
    fake.resources[key] = res

    def done() -> None:
        props["provisioningState"] = "Succeeded"
        if rtype == "virtualmachines":
            res["_power"] = "running"

    url = fake._new_op(done, op_error,
                       polls=fake.vm_op_polls if rtype == "virtualmachines" else None)
    if op_error is not None:
        # ARM leaves the failed resource in place, provisioningState Failed
        def fail_later() -> None:
            props["provisioningState"] = "Failed"
            res.pop("_power", None)
        fake.ops[url.split("/fake-operations/")[1].split("?")[0]].on_success = fail_later
    return h._send(200 if old else 201, _public(res), {"Azure-AsyncOperation": url})


def _find_subnet(fake: Any, subnet_id: str) -> dict[str, Any] | None:
    vnet_id, _, sname = subnet_id.rpartition("/subnets/")
    vnet = fake.resources.get(fake._key_of(vnet_id))
    if vnet is None:
        return None
    for s in vnet["properties"].get("subnets") or []:
        if s["name"].lower() == sname.lower():
            return s  # type: ignore[no-any-return]
    return None


def _action(fake: Any, h: Any, method: str, key: str, res: dict[str, Any] | None,
            action: str, query: dict[str, str], op_error: dict[str, Any] | None) -> None:
    if res is None:
        return h._error(404, "ResourceNotFound", f"The Resource '{key}' was not found.")
    a = action.lower()
    if method == "GET" and a == "instanceview":
        return h._send(200, _instance_view(res))
    if method == "POST" and a in ("deallocate", "start", "poweroff", "restart"):
        target = {"deallocate": "deallocated", "start": "running", "poweroff": "stopped",
                  "restart": "running"}[a]
        res["_power"] = {"deallocate": "deallocating", "start": "starting",
                         "poweroff": "stopping", "restart": "starting"}[a]

        def done() -> None:
            res["_power"] = target

        url = fake._new_op(done, op_error)
        return h._send(202, None, {"Azure-AsyncOperation": url, "Location": url})
    return h._error(405, "MethodNotAllowed", f"{method} {action}")
