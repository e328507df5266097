"""One module per resource. Each route authenticates (a dependency), parses its
parameters, calls one `launcher.api` function (or a ServerStore method) in a worker
thread and returns the result's JSON: no behaviour lives here."""
