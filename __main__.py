"""The per-cluster stack program (see Pulumi.yaml): settings come from this stack's `proxy-component:` config."""

from proxy_component.stack import main

main()
