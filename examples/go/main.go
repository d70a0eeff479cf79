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
		// A workload written by hand gets what the Python stack transform would give its container: ContainerEnv's
		// env, and behind a TLS-inspecting proxy the CA bundle's mount and volume. With the pulumi-kubernetes Go SDK:
		// appsv1.NewDeployment(ctx, "web", ...).
		web, err := egress.ContainerEnv(ctx, &proxycomponent.ClusterProxyContainerEnvArgs{
			Namespace: pulumi.StringRef("default"),
			Runtimes:  pulumi.StringRef("java,node"),
		})
		if err != nil {
			return err
		}
		var deployment pulumi.CustomResourceState
		err = ctx.RegisterResource("kubernetes:apps/v1:Deployment", "web", pulumi.Map{
			"apiVersion": pulumi.String("apps/v1"),
			"kind":       pulumi.String("Deployment"),
			"metadata":   pulumi.Map{"name": pulumi.String("web"), "namespace": pulumi.String("default")},
			"spec": pulumi.Map{
				"selector": pulumi.Map{"matchLabels": pulumi.StringMap{"app": pulumi.String("web")}},
				"template": pulumi.Map{
					"metadata": pulumi.Map{
						"labels":      pulumi.StringMap{"app": pulumi.String("web")},
						"annotations": pulumi.StringMap{"proxy-component.io/runtimes": pulumi.String("java,node")},
					},
					"spec": pulumi.Map{
						"containers": pulumi.Array{pulumi.Map{
							"name":         pulumi.String("web"),
							"image":        pulumi.String("registry.example/web:1"),
							"env":          web.Env(),
							"volumeMounts": web.VolumeMounts(),
						}},
						"volumes": web.Volumes(),
					},
				},
			},
		}, &deployment, pulumi.Provider(&cluster))
		if err != nil {
			return err
		}
		argoCd, err := egress.HelmValuesFor(ctx, &proxycomponent.ClusterProxyHelmValuesForArgs{
			Profile: "argo-cd",
			Release: pulumi.StringRef("gitops"),
		})
		if err != nil {
			return err
		}
		kustomization, err := egress.Kustomization(ctx, &proxycomponent.ClusterProxyKustomizationArgs{
			Kind:      "Deployment",
			Name:      "web",
			Container: pulumi.StringRef("web"),
		})
		if err != nil {
			return err
		}
		ctx.Export("noProxy", egress.NoProxy)
		ctx.Export("noProxyPython", egress.NoProxyPython)
		ctx.Export("proxyUrl", egress.ProxyUrl)
		ctx.Export("env", egress.Env)
		ctx.Export("trust", egress.Trust)
		ctx.Export("argoCdValues", argoCd)
		ctx.Export("webKustomization", kustomization)
		return nil
	})
}
