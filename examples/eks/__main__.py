"""An EKS cluster and its egress proxy: NO_PROXY and tinyproxy's Allow come from the cluster, never typed twice.

`pulumi up` creates a small cluster (control plane and one managed node group)
in the `subnetIds` of this stack, in the `aws:region`; with `clusterName` set it
reads that existing cluster instead. Discovery reads the service CIDR, every
CIDR block of the cluster's VPC, the API server host, the metadata endpoints
and the region's internal DNS suffix.
"""

import json

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import eks, iam

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.discovery import eks as discovery

config = pulumi.Config()
existing = config.get("clusterName")


def assume_role(service: str) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": ["sts:AssumeRole", "sts:TagSession"]}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


if existing:
    found = eks.get_cluster_output(name=existing)
    network = discovery.from_existing(existing)
    name, endpoint, ca_data = pulumi.Output.from_input(existing), found.endpoint, found.certificate_authorities[0].data
    ready: list[pulumi.Resource] = []
else:
    subnet_ids = config.get_object("subnetIds") or []
    if not subnet_ids:
        raise pulumi.RunError("subnetIds: required without clusterName (subnets in two availability zones)")
    cluster_role = iam.Role("cluster", assume_role_policy=assume_role("eks.amazonaws.com"))
    cluster_policy = iam.RolePolicyAttachment(
        "cluster", role=cluster_role.name, policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"
    )
    cluster = eks.Cluster(
        "prod",
        role_arn=cluster_role.arn,
        vpc_config={"subnet_ids": subnet_ids},
        access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
        opts=pulumi.ResourceOptions(depends_on=[cluster_policy]),
    )
    node_role = iam.Role("nodes", assume_role_policy=assume_role("ec2.amazonaws.com"))
    node_policies = [
        iam.RolePolicyAttachment(f"nodes-{policy}", role=node_role.name, policy_arn=f"arn:aws:iam::aws:policy/{policy}")
        for policy in ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")
    ]
    nodes = eks.NodeGroup(
        "nodes",
        cluster_name=cluster.name,
        node_role_arn=node_role.arn,
        subnet_ids=subnet_ids,
        instance_types=["t3.medium"],
        scaling_config={"desired_size": 2, "min_size": 1, "max_size": 3},
        opts=pulumi.ResourceOptions(depends_on=node_policies),
    )
    network = discovery.from_cluster(cluster)
    name, endpoint, ca_data = cluster.name, cluster.endpoint, cluster.certificate_authority.data
    ready = [nodes]


def kubeconfig(args: list[str]) -> str:
    cluster_name, server, ca = args
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "eks", "cluster": {"server": server, "certificate-authority-data": ca}}],
            "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
            "current-context": "eks",
            "users": [
                {
                    "name": "eks",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--output", "json"],
                        }
                    },
                }
            ],
        }
    )


provider = k8s.Provider("eks", kubeconfig=pulumi.Output.all(name, endpoint, ca_data).apply(kubeconfig))
proxy = ClusterProxy(
    "egress",
    ClusterProxyArgs(settings={"cluster": {"name": "prod"}, "namespaces": ["default"]}, network=network),
    pulumi.ResourceOptions(providers=[provider], depends_on=ready),
)

pulumi.export("noProxy", proxy.no_proxy)
pulumi.export("proxyUrl", proxy.proxy_url)
