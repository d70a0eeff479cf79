"""The data plane: everything about the proxy that runs on the nodes, in one room.

- `image`: the project's image and the tinyproxy it carries (imports nothing: `scripts/image` runs it directly);
- `config`: tinyproxy.conf, its Filter, their generation, and the ConfigMap or Secret carrying them;
- `firewall`: the kernel's rules (nftables) and the init container that loads them;
- `lifecycle`: the container's command (tinyproxy, the reload watcher, the drain on SIGTERM) and what rolls it;
- `metrics`: the exporter and what watches it (PodMonitor, alerts, dashboard);
- `workload`: the DaemonSet, its probes and placement, and the Service.

The sources it runs are beside the package: `images/proxy/` (the tinyproxy patches, the exporter, the package
pins) and `scripts/image`. Import from the modules: this file imports none of them, so that `settings` can read
`image`'s pins without loading what depends on the settings.
"""
