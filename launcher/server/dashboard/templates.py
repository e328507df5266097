"""The dashboard's HTML: Jinja2 templates with autoescaping on (a job name, log line or
label shows as text, never as markup), kept here as strings so the package needs no
data files. No script or style is loaded from elsewhere: the pages work offline."""

from __future__ import annotations

import time
from typing import Any

from jinja2 import DictLoader, Environment, select_autoescape
from markupsafe import Markup

from launcher.server.dashboard.timeline import duration as _dur

CSS = """
*{box-sizing:border-box}body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}header{background:#1d2330;color:#fff;padding:.6em 1em;display:flex;
flex-wrap:wrap;gap:1em;align-items:center}header a{color:#fff;text-decoration:none;
font-weight:600}header .who{margin-left:auto;opacity:.85}main{padding:1em;max-width:1200px;
margin:auto}h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.4em 0 .4em}
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #e3e6eb;white-space:nowrap}
th{background:#eef0f4;font-weight:600}td.wrap{white-space:normal;min-width:16em}td.num,th.num{text-align:right}
.st{font-weight:600;padding:.05em .45em;border-radius:.3em;background:#e3e6eb}
.st-RUNNING,.st-UP,.st-SUCCEEDED{background:#d5f0dc;color:#17612c}
.st-RECOVERING,.st-STARTING,.st-PENDING,.st-INIT,.st-SUBMITTED{background:#fdf0cc;color:#6b4e00}
.st-FAILED,.st-PREEMPTED,.st-FAILED_SETUP,.st-FAILED_NO_RESOURCE{background:#f8d7d7;color:#8a1c1c}
.st-CANCELLED,.st-STOPPED,.st-CANCELLING{background:#e3e6eb;color:#444}
.ns-up,.hs-ok{background:#d5f0dc;color:#17612c}.ns-unreachable,.ns-pending,.ns-provisioning,
.hs-warn{background:#fdf0cc;color:#6b4e00}.ns-preempted,.ns-terminated,.hs-fail{background:#f8d7d7;
color:#8a1c1c}
pre.log{background:#11151c;color:#d7dde8;padding:.8em;max-height:32em;overflow:auto;
white-space:pre-wrap;word-break:break-all;font-size:13px}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(11em,1fr));gap:.5em;
margin:.5em 0}.facts div{background:#fff;padding:.45em .7em;border:1px solid #e3e6eb}
.facts b{display:block;font-size:.8em;color:#5a6272;font-weight:500}
button{font:inherit;padding:.3em .9em;border:1px solid #8a1c1c;background:#fff;color:#8a1c1c;
border-radius:.3em;cursor:pointer}button.plain{border-color:#fff;background:none;color:#fff}
form.inline{display:inline}.login{max-width:26em;margin:4em auto;background:#fff;padding:1.5em;
border:1px solid #e3e6eb}.login input{width:100%;padding:.45em;font:inherit;margin:.4em 0 .8em}
.login button{border-color:#1d2330;color:#1d2330}.err{color:#8a1c1c;font-weight:600}
.muted{color:#5a6272}svg text{font:12px system-ui,sans-serif}.pager a{margin-right:1em}
"""

# Elements with data-refresh="URL" are replaced by that URL's HTML every few seconds
# while data-live is "1"; a <pre data-log="URL"> follows an event stream of log lines.
JS = """
function refresh(el){fetch(el.dataset.refresh,{credentials:'same-origin'}).then(r=>{
 if(r.redirected||!r.ok)return null;return r.text()}).then(t=>{if(t===null)return;
 const d=document.createElement('div');d.innerHTML=t;const n=d.firstElementChild;
 if(n){el.replaceWith(n);watch(n)}}).catch(()=>{})}
function watch(el){if(el.dataset.live==='1')setTimeout(()=>refresh(el),2000)}
document.querySelectorAll('[data-refresh]').forEach(watch);
document.querySelectorAll('pre[data-log]').forEach(pre=>{
 const es=new EventSource(pre.dataset.log);
 es.onopen=()=>{pre.textContent=""};
 es.onmessage=e=>{const m=JSON.parse(e.data);
  const stick=pre.scrollTop+pre.clientHeight>=pre.scrollHeight-4;
  if('line' in m){pre.append(m.line+'\\n')}
  else{pre.append(m.error?('[log ended: '+m.error.message+']\\n'):'[log ended]\\n');
   pre.dataset.ended='1';es.close()}
  if(stick)pre.scrollTop=pre.scrollHeight};
 es.onerror=()=>{if(pre.dataset.ended)es.close()}});
"""

BASE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{{ title }} · launcher</title><style>{{ css }}</style></head><body>
{% if user %}<header><a href="{{ p }}/">launcher</a><a href="{{ p }}/clusters">Clusters</a>
<a href="{{ p }}/jobs">Managed jobs</a><a href="{{ p }}/cost">Cost</a><a href="{{ p }}/gpus">GPUs</a>
{% if user.is_admin %}<a href="{{ p }}/users">Users</a>{% endif %}
<span class="who">{{ user.name }} ({{ user.role }})</span>
<form class="inline" method="post" action="{{ p }}/logout"><input type="hidden" name="csrf"
value="{{ csrf }}"><button class="plain" type="submit">Log out</button></form></header>
{% endif %}<main>{% block main %}{% endblock %}</main><script>{{ js }}</script></body></html>"""

LOGIN = """{% extends "base" %}{% block main %}<form class="login" method="post"
action="{{ p }}/login"><h1>launcher dashboard</h1>{% if error %}<p class="err" id="error">
{{ error }}</p>{% endif %}<label for="token">API token</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus>
<button type="submit" id="login">Log in</button><p class="muted">An admin makes tokens with
<code>launcher users create NAME</code>.</p></form>{% endblock %}"""

ERROR = """{% extends "base" %}{% block main %}<h1>{{ title }}</h1><p class="err">{{ message }}
</p>{% endblock %}"""

ACTION = """<form class="inline" method="post" action="{{ action }}"
onsubmit="return confirm({{ confirm|tojson|forceescape }})"><input type="hidden" name="csrf"
value="{{ csrf }}"><button type="submit" id="{{ bid }}">{{ text }}</button></form>"""

CLUSTERS = """{% extends "base" %}{% block main %}<h1>Clusters</h1>{% include "clusters_t" %}
{% endblock %}"""

CLUSTERS_T = """<div class="scroll" data-refresh="{{ p }}/clusters?fragment=1" data-live="1">
<table id="clusters"><tr><th>Name</th><th>Status</th><th>Cloud / region / zone</th>
<th>Resources</th><th class="num">Nodes</th><th>Market</th><th>Fabric</th>
<th class="num">$/h</th><th>Uptime</th>
<th class="num">Cost so far</th><th>Autostop</th>{% if show_owner %}<th>Owner</th>{% endif %}
<th></th></tr>{% for c in rows %}<tr><td><a href="{{ p }}/clusters/{{ c.name|urlencode }}">
{{ c.name }}</a></td><td><span class="st st-{{ c.status }}">{{ c.status }}</span></td>
<td>{{ c.cloud }} / {{ c.region }}{% if c.zone %} / {{ c.zone }}{% endif %}</td>
<td>{{ c.resources }}</td><td class="num">{{ c.num_nodes }}</td><td>{{ 'spot' if c.use_spot
else 'on-demand' }}</td><td>{{ fabric.get(c.name, '-') }}</td>
<td class="num">{{ c.hourly_cost|money }}</td><td>{{ (now - c.launched_at)|dur }}</td>
<td class="num">{{ cost.get(c.name, 0)|money }}</td><td>{% if c.autostop_minutes is not none
%}{{ c.autostop_minutes }}m{% if c.autostop_down %} (down){% endif %}{% else %}-{% endif %}
</td>{% if show_owner %}<td>{{ owners.get(c.name) or '-' }}</td>{% endif %}<td>{% if
c.status == 'UP' %}{% with action=p ~ '/clusters/' ~ (c.name|urlencode) ~ '/stop',
confirm='Stop cluster ' ~ c.name ~ '? Its disks are kept.', bid='stop-' ~ c.name, text='Stop' %}
{% include "action" %}{% endwith %}{% endif %}{% with action=p ~ '/clusters/' ~ (c.name|urlencode) ~ '/down', confirm='Tear down cluster ' ~ c.name
~ '? Its nodes are released.', bid='down-' ~ c.name, text='Down' %}{% include "action" %}
{% endwith %}</td></tr>{% else %}<tr><td colspan="13" class="muted">No clusters.</td></tr>
{% endfor %}</table></div>"""

CLUSTER = """{% extends "base" %}{% block main %}<h1>Cluster {{ c.name }}</h1><div class="facts">
<div><b>Cloud / region / zone</b>{{ c.cloud }} / {{ c.region }} / {{ c.zone or '-' }}</div>
<div><b>Resources</b>{{ c.resources }}</div><div><b>Nodes</b>{{ c.num_nodes }}</div>
<div><b>Market</b>{{ 'spot' if c.use_spot else 'on-demand' }}</div><div><b>Fabric</b>{{ fabric
}}</div>
<div><b>$/h</b>{{ c.hourly_cost|money }}</div><div><b>Uptime</b>{{ (now - c.launched_at)|dur }}
</div><div><b>Cost so far</b>{{ cost|money }}</div></div>
{% if c.status == 'UP' %}{% with action=p ~ '/clusters/' ~ (c.name|urlencode) ~ '/stop',
confirm='Stop cluster ' ~ c.name ~ '? Its disks are kept.', bid='stop', text='Stop' %}{% include
"action" %}{% endwith %}{% endif %}{% with action=p ~ '/clusters/' ~ (c.name|urlencode) ~ '/down', confirm='Tear down cluster '
~ c.name ~ '?', bid='down', text='Down' %}{% include "action" %}{% endwith %}
<h2>Nodes</h2>{% include "nodes_t" %}
{% if health and health.job_id is not none %}<h2>Health watch (job {{ health.job_id }})</h2>
{% for e in health.events %}<p class="muted">{{ e.ts|ago }} {{ e.kind }}: {{ e.detail }}</p>
{% endfor %}<div class="scroll"><table id="health"><tr><th>When</th><th>Node</th><th>GPU util
</th><th>Memory MiB</th><th>Power W</th><th>Temp C</th><th>Throttle</th><th>Progress</th></tr>
{% for r in health.rows[-60:] %}<tr><td>{{ r.t|ago }}</td><td>{{ r.rank }}</td><td>{{ r.util
if r.util is not none else '-' }}</td><td>{{ r.mem_used if r.mem_used is not none else '-' }}
</td><td>{{ r.power if r.power is not none else '-' }}</td><td>{{ r.temp if r.temp is not none
else '-' }}</td><td>{{ r.throttle|join(', ') or '-' }}</td><td>{{ r.progress if r.progress is
not none else '-' }}</td></tr>{% else %}<tr><td colspan="8" class="muted">No samples yet.</td>
</tr>{% endfor %}</table></div>{% endif %}
<h2>Job queue</h2><div class="scroll"><table id="queue"><tr><th>ID</th><th>Name</th>
<th>Status</th><th>Submitted</th><th></th></tr>{% for j in queue %}<tr><td>{{ j.id }}</td>
<td>{{ j.name or '-' }}</td><td><span class="st st-{{ j.status }}">{{ j.status }}</span></td>
<td>{{ j.submitted_at|ago }}</td><td><a href="?log={{ j.id }}">log</a></td></tr>{% else %}
<tr><td colspan="5" class="muted">{% if queue_error %}The queue could not be read: {{
queue_error }}{% else %}No jobs.{% endif %}</td></tr>{% endfor %}</table></div>
{% if log_job is not none %}<h2>Log of job {{ log_job }}</h2><pre class="log" id="log"
data-log="{{ p }}/clusters/{{ c.name|urlencode }}/log-stream?job_id={{ log_job }}">loading…
</pre>{% endif %}{% endblock %}"""

# The cluster page's node table, re-fetched every few seconds (`/clusters/NAME/nodes`).
NODES_T = """<div class="scroll" id="nodes-box" data-refresh="{{ p }}/clusters/{{ cluster_name|urlencode
}}/nodes" data-live="1">{% if c %}<p id="cluster-now">Status: <span class="st st-{{ c.status
}}">{{ c.status }}</span>{% if c.status_reason %} <span class="muted">{{ c.status_reason }}</span>{%
endif %}</p>{% endif %}<table id="nodes"><tr><th>Rank</th><th>Node</th><th>State</th>
<th>Health</th><th>Internal IP</th><th>External IP</th><th>SSH</th></tr>{% for n in nodes %}
<tr data-node="{{ n.node_id }}"><td>{{ n.rank }}</td><td>{{ n.node_id }}</td><td class="wrap">
<span class="st ns-{{ n.state }}" title="{{ n.state_detail }}">{{ n.state }}</span>
<span class="muted">{% if n.state_seen_at is not none %}{{ n.state_source }}, {{ n.state_seen_at|ago
}}{% else %}(cluster status){% endif %}</span></td><td class="wrap">{% if n.health %}<span
class="st hs-{{ n.health }}" title="{{ n.health_detail }}">{{ n.health }}</span>{% if n.health !=
'ok' %} {{ n.health_detail }}{% endif %} <span class="muted">{{ n.health_seen_at|ago }}</span>{%
else %}<span class="muted">not checked</span>{% endif %}</td><td>{{ n.internal_ip }}</td><td>{{
n.external_ip or '-' }}</td><td>{% if n.ssh_user %}{{ n.ssh_user }}@{{ n.external_ip or
n.internal_ip }}:{{ n.ssh_port }}{% else %}-{% endif %}</td></tr>{% else %}<tr><td colspan="7"
class="muted">No nodes recorded.</td></tr>{% endfor %}</table></div>"""

JOBS = """{% extends "base" %}{% block main %}<h1>Managed jobs</h1>{% include "jobs_t" %}
{% endblock %}"""

JOBS_T = """<div class="scroll" data-refresh="{{ p }}/jobs?fragment=1&amp;page={{ page }}"
data-live="1"><table id="jobs"><tr><th class="num">ID</th><th>Name</th><th>Status</th>
<th>Where</th><th class="num">Attempts</th><th class="num">Recoveries</th><th>Duration</th>
<th class="num">Cost so far</th><th>Deadline</th>{% if show_owner %}<th>Owner</th>{% endif %}
</tr>{% for j in rows %}<tr><td class="num">{{ j.id }}</td><td><a href="{{ p }}/jobs/{{ j.id
}}">{% if j.pipeline %}{{ j.pipeline }}[{{ j.stage }}/{{ j.stages }}] {% endif %}{{ j.name
}}</a></td><td><span class="st st-{{ j.status }}">{{ j.status }}</span></td><td>{{ j.cloud or
'-' }}{% if j.region %} / {{ j.region }}{% endif %}</td><td class="num">{{ j.attempts }}</td>
<td class="num">{{ j.recoveries }}</td><td>{{ j.duration_s|dur }}</td>
<td class="num">{{ j.cost_so_far|money }}</td><td>{% if j.deadline_at %}{{ ((j.progress or 0)
* 100)|round|int }}% by {{ j.deadline_at|clock }}{% else %}-{% endif %}</td>{% if show_owner
%}<td>{{ owners.get(j.id) or '-' }}</td>{% endif %}</tr>{% else %}<tr><td colspan="10"
class="muted">No managed jobs.</td></tr>{% endfor %}</table><p class="pager">{% if page > 1 %}
<a href="{{ p }}/jobs?page={{ page - 1 }}">← newer</a>{% endif %}{% if more %}<a href="{{ p
}}/jobs?page={{ page + 1 }}">older →</a>{% endif %}<span class="muted">{{ total }} jobs</span>
</p></div>"""

JOB = """{% extends "base" %}{% block main %}{% include "job_t" %}
<h2>Logs (every attempt)</h2><pre class="log" id="log" data-log="{{ p }}/jobs/{{ j.id
}}/log-stream">loading…</pre>{% endblock %}"""

JOB_T = """<div id="job" data-refresh="{{ p }}/jobs/{{ j.id }}?fragment=1" data-live="{{ '0'
if terminal else '1' }}"><h1>Managed job {{ j.id }}: {{ j.name }} <span class="st st-{{
j.status }}" id="status">{{ j.status }}</span></h1><div class="facts">
<div><b>Where now</b>{{ j.cloud or '-' }}{% if j.region %} / {{ j.region }}{% endif %}</div>
<div><b>Attempts</b><span id="attempts">{{ j.attempts }}</span></div>
<div><b>Recoveries</b><span id="recoveries">{{ j.recoveries }}</span></div>
<div><b>Cost so far</b>{{ j.cost_so_far|money }}</div><div><b>Node-hours</b>{{
'%.3f'|format(j.node_hours) }}</div><div><b>Duration</b>{{ j.duration_s|dur }}</div>
<div><b>Work lost</b>{{ j.work_lost_s|dur }}</div>{% if j.deadline_at %}<div><b>Deadline</b>
{{ j.deadline_at|clock }} ({{ ((j.progress or 0) * 100)|round|int }}% done, projected {{
j.projected_finish_at|clock }}, now {{ j.mode or '-' }})</div>{% endif %}
{% if j.failure_reason %}<div><b>Failure</b>{{ j.failure_reason }}</div>{% endif %}</div>
{% if not terminal %}{% with action=p ~ '/jobs/' ~ j.id ~ '/cancel', confirm='Cancel managed job '
~ j.id ~ '?', bid='cancel', text='Cancel job' %}{% include "action" %}{% endwith %}{% endif %}
<h2>Timeline</h2><div class="scroll"><svg id="timeline" role="img" viewBox="0 0 {{ t.width }}
{{ t.height }}" width="100%" style="min-width:640px;background:#fff;border:1px solid #e3e6eb">

{% for b in t.bars %}<g class="attempt" data-outcome="{{ b.outcome }}"><title>{{ b.title }}
</title><text x="{{ [b.x0, 620]|min }}" y="{{ b.y + 13 }}">{{ b.label }}</text>{% if b.x_run
is not none %}<rect x="{{ b.x0 }}" y="{{ b.y + 18 }}" width="{{ [b.x_run - b.x0, 1]|max }}"
height="14" fill="#b9c4d6"/><rect x="{{ b.x_run }}" y="{{ b.y + 18 }}" width="{{ [b.x1 -
b.x_run, 2]|max }}" height="14" fill="{{ colors.get(b.outcome, '#5b8def') }}"/>{% else %}
<rect x="{{ b.x0 }}" y="{{ b.y + 18 }}" width="{{ [b.x1 - b.x0, 2]|max }}" height="14"
fill="#b9c4d6"/>{% endif %}</g>{% endfor %}
{# over the attempts' grey: what the recovery did then #}{% for g in t.gaps %}<g class="gap">
<title>{{ g.title }}</title>{% if g.phases %}{% for ph in g.phases %}<rect class="phase" data-phase="{{ ph.name }}" data-seconds="{{ '%.1f'|format(ph.seconds)
}}" x="{{ ph.x0 }}" y="{{ g.y + 18 }}" width="{{ [ph.x1 - ph.x0, 1]|max }}" height="14" fill="{{
ph.color }}"><title>{{ ph.name }} {{ ph.seconds|dur }}</title></rect>{% endfor %}{% else %}<rect
x="{{ g.x0 }}" y="{{ g.y + 18 }}" width="{{ [g.x_ask - g.x0, 0]|max }}" height="14"
fill="#f3c7c7"/><rect x="{{ g.x_ask }}" y="{{ g.y + 18 }}" width="{{ [g.x1 - g.x_ask, 0]|max }}"
height="14" fill="#fde7a8"/>{% endif %}<text x="{{ [g.x0 + 3, 520]|min }}" y="{{ g.y + 44 }}"
fill="#6b4e00">{{ g.label }}</text></g>{% endfor %}{% for m in t.preemptions %}<g class="preemption">
<title>{{ m.title }}</title><path d="M{{ m.x }} {{ m.y + 14 }} l-6 -9 h12 z" fill="#c0392b"/>
<line x1="{{ m.x }}" x2="{{ m.x }}" y1="{{ m.y + 14 }}" y2="{{ m.y + 36 }}" stroke="#c0392b"
stroke-width="2"/><text x="{{ m.x + 8 }}" y="{{ m.y + 44 }}" fill="#c0392b">{{ m.label }}
</text></g>{% endfor %}{% for v in t.lines %}<g class="vline {{ v.kind }}"><title>{{ v.title
}}</title><line x1="{{ v.x }}" x2="{{ v.x }}" y1="2" y2="{{ t.axis_y }}" stroke="{{
line_colors[v.kind] }}" stroke-width="1.5" stroke-dasharray="4 3"/><text x="{{ [v.x + 3,
t.width - 110]|min }}" y="{{ t.axis_y - 4 }}" fill="{{ line_colors[v.kind] }}">{{ v.label
}}</text></g>{% endfor %}<line x1="0" x2="{{ t.width }}" y1="{{ t.axis_y }}" y2="{{ t.axis_y }}"
stroke="#c9ced8"/>{% for x, label in t.ticks %}<text x="{{ [[x - 14, 0]|max, t.width - 50]|min
}}" y="{{ t.axis_y + 16 }}" fill="#5a6272">{{ label }}</text>{% endfor %}</svg></div>
<p class="muted">Grey: provisioning and setup · colour: running (blue running, green succeeded,
red preempted or failed) · gap: a recovery, in phases:{% for name, color in phase_colors.items() if name !=
'relaunch + setup' %} <span style="color:{{ color }}">■</span> {{ name }}{% endfor %} (hover for each one's time; red/yellow: deciding, then
provisioning, where the controller did not record the phases) · ▼ preempted{%
if t.lines %} · dashed: policy switches, deadline, projected finish{% endif %}.
</p><h2>Attempts</h2><div class="scroll"><table id="attempt-table"><tr><th>#</th><th>Cause</th>
<th>Where</th><th>Market</th><th class="num">$/h per node</th><th>Started</th><th>Ran</th>
<th>Outcome</th><th class="num">Recovery</th><th class="num">Cost</th></tr>{% for a in
attempts %}<tr><td>{{ a.attempt }}</td><td>{{ a.cause }}</td><td>{{ a.where }} ({{ a.cluster
}})</td><td>{{ 'spot' if a.use_spot else ('on-demand' if a.use_spot is not none else '-') }}
</td><td class="num">{{ a.node_price|money }}</td><td>{{ a.started_at|clock }}</td><td>{{
((a.ended_at or now) - a.running_at)|dur if a.running_at else '-' }}</td><td class="wrap">{{ a.outcome or
'running' }}{% if a.reason %}: {{ a.reason }}{% endif %}</td><td class="num">{{ a.recovery_s|dur
if a.recovery_s is not none else '-' }}</td><td class="num">{{ a.cost|money }}</td></tr>
{% endfor %}</table></div><h2>Controller events</h2><div class="scroll"><table id="events">
<tr><th>When</th><th>Attempt</th><th>Change</th><th>Why</th></tr>{% for e in events %}<tr><td>
{{ e.at|clock }}</td><td>{{ e.attempt or '-' }}</td><td>{{ e.from_status or '·' }} → {{
e.to_status }}</td><td class="wrap">{{ e.reason }}</td></tr>{% endfor %}</table></div></div>"""

COST = """{% extends "base" %}{% block main %}<h1>Cost, last {{ '%g'|format(days) }} days</h1>
<div class="facts"><div><b>Total</b><span id="total">{{ v.total|money }}</span></div>
<div><b>Node-hours</b>{{ '%.2f'|format(v.node_hours) }}</div>{% for cloud, c in v.by_cloud %}
<div><b>{{ cloud }}</b>{{ c|money }}</div>{% endfor %}</div>{% if v.by_user %}<h2>By user</h2>
<div class="facts" id="by-user">{% for who, c in v.by_user %}<div><b>{{ who }}</b>{{ c|money }}
</div>{% endfor %}</div>{% endif %}{% if v.by_job %}<h2>By managed job (the most expensive)</h2>
<div class="facts" id="by-job">{% for job_id, c in v.by_job %}<div><b><a href="{{ p }}/jobs/{{
job_id }}">job {{ job_id }}</a></b>{{ c|money }}</div>{% endfor %}</div>{% endif %}<h2>By day</h2><div class="scroll"><svg id="by-day"
viewBox="0 0 {{ 48 * v.days|length + 10 }} 140" width="{{ 48 * v.days|length + 10 }}"
height="140" style="background:#fff;border:1px solid #e3e6eb">{% for d in v.days %}{% set
x = 10 + loop.index0 * 48 %}<g><title>{{ d.label }}: {{ d.total|money }}</title>{% for cloud,
c, y, h in d.parts %}<rect x="{{ x }}" y="{{ y + 6 }}" width="34" height="{{ h }}" fill="{{
v.colors[cloud] }}"><title>{{ d.label }} {{ cloud }}: {{ c|money }}</title></rect>{% endfor %}
<text x="{{ x }}" y="132" fill="#5a6272">{{ d.label }}</text></g>{% endfor %}</svg></div>
<p class="muted">{% for cloud, color in v.colors.items() %}<span style="color:{{ color }}">■
</span> {{ cloud }} &nbsp; {% endfor %}</p><h2>Lines</h2><div class="scroll">
<table id="cost-lines"><tr><th>Cluster</th><th>Managed job</th><th>Cloud / region</th>
<th>Resources</th><th>Market</th><th class="num">$/h</th><th class="num">Hours</th>
<th class="num">Cost</th><th style="min-width:8em"></th></tr>{% for line in lines %}<tr><td>{{ line.cluster }}</td><td>{% if
line.job_id %}<a href="{{ p }}/jobs/{{ line.job_id }}">{{ line.job_id }}</a> #{{ line.attempt
}}{% else %}-{% endif %}</td><td>{{ line.cloud }} / {{ line.region }}</td><td>{{
line.num_nodes }}x {{ line.instance_type }}</td><td>{{ 'spot' if line.use_spot else
'on-demand' }}</td><td class="num">{{ line.hourly_cost|money }}</td><td class="num">{{
'%.3f'|format(line.hours) }}</td><td class="num">{{ line.cost|money }}</td><td><div style="background:#5b8def;
height:.8em;width:{{ (100 * line.cost / top)|round(1) if top else 0 }}%"></div></td></tr>
{% else %}<tr><td colspan="9" class="muted">Nothing in this window.</td></tr>{% endfor %}</table>
<p class="pager">{% if page > 1 %}<a href="{{ p }}/cost?days={{ '%g'|format(days) }}&amp;page={{
page - 1 }}">← more expensive</a>{% endif %}{% if more %}<a href="{{ p }}/cost?days={{
'%g'|format(days) }}&amp;page={{ page + 1 }}">cheaper →</a>{% endif %}<span class="muted">{{
v.count }} lines</span></p></div>{% endblock %}"""

USERS = """{% extends "base" %}{% block main %}<h1>Users</h1>{% if new_token %}<div class="facts">
<div id="new-token"><b>New token for {{ new_for }} (shown once: copy it now)</b><code>{{
new_token }}</code></div></div>{% endif %}{% if error %}<p class="err" id="error">{{ error }}</p>
{% endif %}<div class="scroll"><table id="users"><tr><th>Name</th><th>Role</th><th>Created</th>
<th>Token rotated</th><th class="num">Cost, 30 days</th><th></th></tr>{% for u in users %}<tr
data-user="{{ u.name }}"><td>{{ u.name }}</td><td>{{ u.role }}</td><td>{{ u.created_at|clock
}}</td><td>{{ u.rotated_at|clock }}</td><td class="num cost">{{ spent.get(u.name, 0)|money
}}</td><td>{% with
action=p ~ '/users/' ~ (u.name|urlencode) ~ '/rotate', confirm='Rotate the token of ' ~ u.name
~ '? The old one stops working.', bid='rotate-' ~ u.name, text='Rotate token' %}{% include
"action" %}{% endwith %} {% if u.name != user.name %}{% with action=p ~ '/users/' ~
(u.name|urlencode) ~ '/delete', confirm='Delete user ' ~ u.name ~ '?', bid='delete-' ~ u.name,
text='Delete' %}{% include "action" %}{% endwith %}{% endif %}</td></tr>{% endfor %}</table>
</div><h2>New user</h2><form method="post" action="{{ p }}/users"><input type="hidden"
name="csrf" value="{{ csrf }}"><label>Name <input name="name" id="new-name" required
pattern="[a-z][a-z0-9_.\\-]{0,62}"></label> <label>Role <select name="role" id="new-role">
<option>user</option><option>admin</option></select></label> <button type="submit"
id="create">Create</button></form>{% endblock %}"""

GPUS = """{% extends "base" %}{% block main %}<h1>GPUs</h1><form method="get" action="{{ p
}}/gpus" class="facts"><div><b>Accelerator</b><input name="accelerator" id="accelerator"
value="{{ q.accelerator }}" placeholder="H100" required></div><div><b>GPUs per node</b><input
name="count" id="count" value="{{ q.count }}" placeholder="any"></div><div><b>Nodes</b><input
name="nodes" id="nodes" type="number" min="1" value="{{ q.nodes }}"></div><div><b>Fabric</b>
<input name="fabric" value="{{ q.fabric }}" placeholder="any"></div><div><b>Cloud</b><input
name="cloud" value="{{ q.cloud }}" placeholder="any"></div><div><b>Spot</b><input
type="checkbox" name="spot" value="true" {{ 'checked' if q.spot }}> <button type="submit"
id="query">Find</button></div></form>{% if error %}<p class="err" id="error">{{ error }}</p>
{% endif %}{% if rows %}<div class="scroll"><table id="gpus"><tr><th>#</th><th>Cloud</th><th>Launchable</th>
<th>Instance type</th><th>GPUs</th><th>Region</th><th class="num">$/GPU-h</th>
<th class="num">$/h per node</th><th class="num">$/h × {{ q.nodes }}</th><th>Fabric</th>
</tr>{% for r in rows %}{% set price = r.spot_price if q.spot else r.price
%}<tr><td>{{ loop.index }}</td><td>{{ r.cloud }}</td><td>{% if r.cloud in
enabled %}<span class="st st-UP">yes</span>{% else %}<span class="st" title="no credentials
for {{ r.cloud }} on the server">no</span>{% endif %}</td><td>{{ r.instance_type }}</td><td>{{
r.accelerator_count }}x {{ r.accelerator }}</td><td>{{ r.region }}{% if r.regions > 1 %} (+{{
r.regions - 1 }}){% endif %}</td><td class="num">{{ (r.spot_price_per_gpu_hour if q.spot else
r.price_per_gpu_hour)|money }}</td><td class="num">{{ price|money }}</td><td class="num">{{
(price * q.nodes)|money if price is not none else '-' }}</td><td>{{ r.fabric or '-' }}{% if
r.fabric_gbps %} {{ r.fabric_gbps|round|int }} Gb/s{% endif %}</td></tr>{% endfor %}</table></div>{%
elif q.accelerator and not error %}<p class="muted">No offers match.</p>{% endif %}
<p class="muted">From the server's offline catalog, as <code>launcher gpus</code>.</p>
{% endblock %}"""


def _money(v: float | None) -> str:
    if v is None:
        return "-"
    return f"${v:,.4f}" if abs(v) < 1 else f"${v:,.2f}"


def _clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _ago(t: float | None) -> str:
    return "-" if t is None else _dur(time.time() - t) + " ago"


ENV = Environment(
    loader=DictLoader({
        "base": BASE, "login": LOGIN, "error": ERROR, "action": ACTION, "clusters": CLUSTERS,
        "clusters_t": CLUSTERS_T, "cluster": CLUSTER, "nodes_t": NODES_T, "jobs": JOBS, "jobs_t": JOBS_T,
        "job": JOB, "job_t": JOB_T, "cost": COST, "users": USERS, "gpus": GPUS,
    }),
    autoescape=select_autoescape(default=True, default_for_string=True),
)
ENV.filters.update(money=_money, dur=_dur, clock=_clock, ago=_ago)


def render(name: str, **ctx: Any) -> str:
    return ENV.get_template(name).render(css=Markup(CSS), js=Markup(JS), **ctx)  # ours, not data
