// ClusterProxy from TypeScript: the same settings as examples/ipv6-only, rendered to a directory.
import * as pulumi from "@pulumi/pulumi";
import * as proxy from "@pulumi/proxy-component";

// A Kubernetes provider that writes YAML instead of applying it; ConfigMaps and Secrets mutable, so that a
// setting change updates them in place. With @pulumi/kubernetes: new k8s.Provider("cluster", {...}).
class KubernetesProvider extends pulumi.ProviderResource {
    constructor(name: string, props: pulumi.Inputs) {
        super("kubernetes", name, props);
    }
}
const cluster = new KubernetesProvider("cluster", {
    renderYamlToDirectory: "rendered",
    enableConfigMapMutable: "true",
    enableSecretMutable: "true",
});

const egress = new proxy.ClusterProxy("egress", {
    settings: {
        cluster: {
            name: "ipv6-only",
            dnsDomain: "k8s.internal",
            ipFamily: "ipv6",
            podCidrs: ["fd00:10:244::/56"],
            serviceCidrs: ["fd00:10:96::/108"],
            nodeCidrs: ["10.0.0.0/8", "fd00:10::/64"],
            apiServerIps: ["fd00:10:96::1"],
        },
        proxy: { noProxy: ["fd00::/8"] },
        namespaces: ["default"],
    },
}, { providers: [cluster] });

export const noProxy = egress.noProxy;
export const proxyUrl = egress.proxyUrl;
export const env = egress.env;
