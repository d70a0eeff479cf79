"""One stack per existing cluster: `proxy-component:discover` names it, the network is read from its cloud.

The same program as the repository's root `Pulumi.yaml` (proxy_component.stack);
see Pulumi.eks-prod.yaml, Pulumi.gke-prod.yaml and Pulumi.aks-prod.yaml.
"""

from proxy_component.stack import main

main()
