// ClusterProxy from Go: the same settings as examples/ipv6-only, rendered to a directory.
package main

import (
	"example.com/pulumi-proxy-component/sdk/go/proxycomponent"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// kubernetesProvider writes YAML instead of applying it; ConfigMaps and Secrets mutable, so that a setting change
// updates them in place. With the pulumi-kubernetes Go SDK: kubernetes.NewProvider(ctx, "cluster", ...).
type kubernetesProvider struct {
	pulumi.ProviderResourceState
}

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		var cluster kubernetesProvider
		err := ctx.RegisterResource("pulumi:providers:kubernetes", "cluster", pulumi.Map{
			"renderYamlToDirectory":  pulumi.String("rendered"),
			"enableConfigMapMutable": pulumi.String("true"),
			"enableSecretMutable":    pulumi.String("true"),
		}, &cluster)
		if err != nil {
			return err
		}
		egress, err := proxycomponent.NewClusterProxy(ctx, "egress", &proxycomponent.ClusterProxyArgs{
			Settings: &proxycomponent.SettingsArgs{
				Cluster: &proxycomponent.ClusterSettingsArgs{
					Name:         pulumi.String("ipv6-only"),
					DnsDomain:    pulumi.String("k8s.internal"),
					IpFamily:     pulumi.String("ipv6"),
					PodCidrs:     pulumi.ToStringArray([]string{"fd00:10:244::/56"}),
					ServiceCidrs: pulumi.ToStringArray([]string{"fd00:10:96::/108"}),
					NodeCidrs:    pulumi.ToStringArray([]string{"10.0.0.0/8", "fd00:10::/64"}),
					ApiServerIps: pulumi.ToStringArray([]string{"fd00:10:96::1"}),
				},
				Proxy:      &proxycomponent.ProxySettingsArgs{NoProxy: pulumi.ToStringArray([]string{"fd00::/8"})},
				Namespaces: pulumi.ToStringArray([]string{"default"}),
			},
		}, pulumi.Providers(&cluster))
		if err != nil {
			return err
		}
		ctx.Export("noProxy", egress.NoProxy)
		ctx.Export("proxyUrl", egress.ProxyUrl)
		ctx.Export("env", egress.Env)
		return nil
	})
}
