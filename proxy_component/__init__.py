"""proxy-component: HTTP-proxy egress for a whole Kubernetes cluster, as a Pulumi component."""
