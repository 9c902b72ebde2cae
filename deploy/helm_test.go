package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir        = "helm/drainer"
	chartRulesFile  = chartDir + "/files/alerts.rules.yaml"
	chartConfigFile = "drainer.yaml"
)

// release is where a test installs the chart.
type release struct{ name, namespace string }

// The release of deploy/README.md (`helm install drainer … -n drainer`): its
// objects have the kustomize manifests' names.
var defaultRelease = release{"drainer", "drainer"}

// allOptional turns on every optional part of the chart.
var allOptional = map[string]any{
	"serviceMonitor": map[string]any{"enabled": true},
	"prometheusRule": map[string]any{"enabled": true},
	"keda":           map[string]any{"enabled": true},
}

// renderChart renders the chart as `helm template NAME deploy/helm/drainer
// -n NAMESPACE` with vals on top of values.yaml, values.schema.json
// enforced, and a template reading a missing value failing.
func renderChart(t *testing.T, rel release, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: rel.name, Namespace: rel.namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, top)
}

// chartManifests renders the chart and decodes every document strictly,
// as load does the kustomize manifests. The chart creates no Secret: the
// Secret the references resolve against is secret.example.yaml's.
func chartManifests(t *testing.T, rel release, vals map[string]any) *manifests {
	t.Helper()
	out, err := renderChart(t, rel, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var docs []doc
	for _, name := range names {
		docs = append(docs, splitDocs(t, name, []byte(out[name]))...)
	}
	m := assemble(t, docs)
	switch {
	case m.secret != nil:
		t.Errorf("the chart renders a Secret %s: secrets are referenced, never created", m.secret.Name)
	case m.namespace != nil || m.kustomization != nil:
		t.Errorf("the chart renders a Namespace or a Kustomization")
	case m.configMap == nil || m.deployment == nil || m.service == nil:
		t.Errorf("the chart renders no ConfigMap, Deployment or Service")
	}
	if t.Failed() {
		t.FailNow()
	}
	data, err := os.ReadFile(secretExampleFile)
	if err != nil {
		t.Fatal(err)
	}
	m.secret = assemble(t, splitDocs(t, secretExampleFile, data)).secret
	return m
}

// checkChartCRDs validates the chart's custom resources against the CRD
// schemas in testdata/crds.
func checkChartCRDs(t *testing.T, rel release, vals map[string]any) {
	t.Helper()
	schemas := loadCRDSchemas(t)
	out, err := renderChart(t, rel, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	for name, text := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, d := range splitDocs(t, name, []byte(text)) {
			if s, ok := schemas[d.gvk]; ok {
				var v any
				if err := json.Unmarshal(d.json, &v); err != nil {
					t.Fatal(err)
				}
				for _, e := range validateSchema(d.gvk, v, s.Schema) {
					t.Errorf("%s: %s", d.where, e)
				}
			}
		}
	}
}

// TestHelmChartDefaults renders the chart with its default values: the
// kustomize manifests' checks pass, and the daemon's pod is the one of
// deployment.yaml (same args, env, probes, grace period, security).
func TestHelmChartDefaults(t *testing.T) {
	k := load(t) // first: load stops a test that has failed already
	m := chartManifests(t, defaultRelease, nil)
	checkDeployment(t, m)
	checkConfigMapConfig(t, m)
	checkServiceMonitoringAndDisruptions(t, m)
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	checkImageContract(t, string(df), m)
	if m.serviceMonitor != nil || m.prometheusRule != nil || m.scaledObject != nil {
		t.Errorf("ServiceMonitor, PrometheusRule and ScaledObject must be off by default (they need CRDs)")
	}
	if m.pdb == nil {
		t.Errorf("no PodDisruptionBudget by default")
	}
	if r := m.deployment.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("without KEDA the Deployment must set replicas (at least 2), got %v", r)
	}

	if got, want := m.configMap.Data[chartConfigFile], k.configMap.Data[chartConfigFile]; got != want {
		t.Errorf("the chart's default config is not configmap.yaml's:\n%s\nwant:\n%s", got, want)
	}
	// The pod: the chart's differs from deployment.yaml's only in labels,
	// annotations, image pull policy and replicas.
	kp, cp := k.deployment.Spec.Template.Spec.DeepCopy(), m.deployment.Spec.Template.Spec.DeepCopy()
	for _, p := range []*corev1.PodSpec{kp, cp} {
		p.TopologySpreadConstraints = nil // selects the release's pods
		for _, cs := range [][]corev1.Container{p.InitContainers, p.Containers} {
			for i := range cs {
				cs[i].ImagePullPolicy = ""
			}
		}
	}
	for _, f := range []func(*corev1.PodSpec) any{
		func(p *corev1.PodSpec) any { return p.InitContainers },
		func(p *corev1.PodSpec) any { return p.Containers },
		func(p *corev1.PodSpec) any { return p.Volumes },
		func(p *corev1.PodSpec) any { return p.SecurityContext },
		func(p *corev1.PodSpec) any { return p.TerminationGracePeriodSeconds },
	} {
		if a, b := f(cp), f(kp); !reflect.DeepEqual(a, b) {
			ja, _ := json.MarshalIndent(a, "", " ")
			jb, _ := json.MarshalIndent(b, "", " ")
			t.Errorf("the chart's pod differs from deployment.yaml's:\n%s\nwant:\n%s", ja, jb)
		}
	}
	if len(m.deployment.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Errorf("no default topologySpreadConstraints")
	}

	// The image tag: the chart's appVersion is the kustomization's tag.
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	checkChartVersion(t, ch, k.kustomization)
}

func checkChartVersion(t *testing.T, ch *chart.Chart, k *kustomization) {
	t.Helper()
	for _, im := range k.Images {
		if im.Name == imageRepo && im.NewTag != ch.Metadata.AppVersion {
			t.Errorf("Chart.yaml appVersion %q, but %s tags %s %q", ch.Metadata.AppVersion, kustomizationFile, imageRepo, im.NewTag)
		}
	}
	if v, _ := ch.Values["image"].(map[string]any); v["repository"] != imageRepo {
		t.Errorf("values.yaml image.repository %v, want %s", v["repository"], imageRepo)
	}
}

// TestHelmChartAllEnabled renders the chart with every optional part on,
// for the release of the README and for another name and namespace: the
// job and namespace the rules and the KEDA query select follow the release.
func TestHelmChartAllEnabled(t *testing.T) {
	for _, rel := range []release{defaultRelease, {"payments", "billing"}} {
		t.Run(rel.name+"/"+rel.namespace, func(t *testing.T) {
			k := load(t)
			m := chartManifests(t, rel, allOptional)
			checkDeployment(t, m)
			checkConfigMapConfig(t, m)
			checkServiceMonitoringAndDisruptions(t, m)
			if m.serviceMonitor == nil || m.prometheusRule == nil || m.scaledObject == nil || m.pdb == nil {
				t.Fatalf("an optional part was not rendered")
			}
			checkScaledObject(t, m, rel.namespace)
			checkRuleJobs(t, m)
			checkChartCRDs(t, rel, allOptional)
			if rel == defaultRelease && m.service.Name != "drainer" {
				t.Errorf("release drainer: Service %q, want drainer (the job the rules' defaults select)", m.service.Name)
			}
			if a, b := len(m.prometheusRule.Spec.Groups), len(k.prometheusRule.Spec.Groups); a != b || a == 0 {
				t.Errorf("the chart's PrometheusRule has %d groups, %s %d", a, prometheusRuleFile, b)
			}
		})
	}
}

// TestHelmChartRules: the chart's copy of the alert rules is
// dashboards/alerts.rules.yaml (rewritten by -update).
func TestHelmChartRules(t *testing.T) {
	want, err := os.ReadFile(rulesSource)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(chartRulesFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(chartRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go test ./deploy -run TestHelmChartRules -update", chartRulesFile, rulesSource)
	}
}

// TestHelmChartSecretsByReference: the chart passes secrets only as
// secretKeyRef env vars and secret volumes, to migrate as to the daemon.
func TestHelmChartSecretsByReference(t *testing.T) {
	m := chartManifests(t, defaultRelease, map[string]any{
		"databaseUrl": map[string]any{"secretName": "app-db", "secretKey": "url"},
		"migrate":     map[string]any{"databaseUrl": map[string]any{"secretName": "app-db-owner", "secretKey": "url"}},
		"secretFiles": []any{map[string]any{"secretName": "tls-client", "mountPath": "/etc/drainer-tls"}},
		"extraEnv":    []any{map[string]any{"name": "TZ", "value": "UTC"}},
	})
	pod := m.deployment.Spec.Template.Spec
	ref := func(c *corev1.Container, name string) string {
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		return ""
	}
	run, mig := container(t, pod.Containers, "drainer"), container(t, pod.InitContainers, "migrate")
	if got := ref(run, "DRAINER_DATABASE_URL"); got != "app-db/url" {
		t.Errorf("drainer: DRAINER_DATABASE_URL from %q, want app-db/url", got)
	}
	if got := ref(mig, "DRAINER_DATABASE_URL"); got != "app-db-owner/url" {
		t.Errorf("migrate: DRAINER_DATABASE_URL from %q, want app-db-owner/url", got)
	}
	if len(mig.Args) != 1 || mig.Args[0] != "migrate" || mig.Command != nil {
		t.Errorf("migrate initContainer: command %q args %q, want the image's /drainer with `migrate`", mig.Command, mig.Args)
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if len(c.EnvFrom) > 0 {
			t.Errorf("container %s: envFrom would put every key of a Secret in the DRAINER_* flags", c.Name)
		}
		for _, e := range c.Env {
			// TZ comes from extraEnv; GOMEMLIMIT is the chart's own (no secret).
			if e.ValueFrom == nil && e.Name != "TZ" && e.Name != "GOMEMLIMIT" {
				t.Errorf("container %s: env %s has a literal value", c.Name, e.Name)
			}
		}
	}
	var mounted bool
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "tls-client" {
			mounted = slices.ContainsFunc(run.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return vm.Name == v.Name && vm.MountPath == "/etc/drainer-tls" && vm.ReadOnly
			})
		}
	}
	if !mounted {
		t.Errorf("secretFiles: Secret tls-client is not mounted read-only at /etc/drainer-tls")
	}

	// migrate.enabled false: no initContainer.
	off := chartManifests(t, defaultRelease, map[string]any{"migrate": map[string]any{"enabled": false}})
	if ic := off.deployment.Spec.Template.Spec.InitContainers; len(ic) != 0 {
		t.Errorf("migrate.enabled false: initContainers %v", ic)
	}
}

// TestHelmValuesSchema: values.schema.json refuses a misspelt key, a wrong
// type, and a secret given by value where a reference is expected.
func TestHelmValuesSchema(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals string
		want string // in the error
	}{
		{"wrong type", `replicaCount: two`, "replicaCount"},
		{"unknown top-level key", `replicas: 3`, "replicas"},
		{"misspelt nested key", `keda: {enable: true}`, "enable"},
		{"secret value instead of a reference", `databaseUrl: "postgres://drainer:pw@db/app"`, "databaseUrl"},
		{"secret env without its key", `secretEnv: [{name: TOKEN, secretName: s}]`, "secretKey"},
		{"database URL in secretEnv", `secretEnv: [{name: DRAINER_DATABASE_URL, secretName: s, secretKey: k}]`, "secretEnv"},
		{"secret file over the config", `secretFiles: [{secretName: s, mountPath: /etc/drainer/tls}]`, "mountPath"},
		{"shutdown timeout not a duration", `shutdownTimeout: "30"`, "shutdownTimeout"},
		{"unknown pull policy", `image: {pullPolicy: Sometimes}`, "pullPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderChart(t, defaultRelease, vals)
			if err == nil {
				t.Fatalf("rendered with %s", tc.vals)
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestHelmChartGoMemLimit: GOMEMLIMIT follows the memory limit (90%, in
// MiB), goMemLimit overrides it, extraEnv naming it wins, no memory limit
// sets none, and a limit in another unit asks for goMemLimit.
func TestHelmChartGoMemLimit(t *testing.T) {
	env := func(vals map[string]any) []string {
		t.Helper()
		m := chartManifests(t, defaultRelease, vals)
		var got []string
		for _, e := range container(t, m.deployment.Spec.Template.Spec.Containers, "drainer").Env {
			if e.Name == "GOMEMLIMIT" {
				got = append(got, e.Value)
			}
		}
		return got
	}
	limits := func(mem string) map[string]any {
		l := map[string]any{"cpu": "1", "memory": nil} // nil: values.yaml's removed
		if mem != "" {
			l["memory"] = mem
		}
		return map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "100m"}, "limits": l}}
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want []string
	}{
		{"default 512Mi", nil, []string{"460MiB"}},
		{"1Gi", limits("1Gi"), []string{"921MiB"}},
		{"200Mi", limits("200Mi"), []string{"180MiB"}},
		{"no memory limit", limits(""), nil},
		{"goMemLimit", map[string]any{"goMemLimit": "300MiB"}, []string{"300MiB"}},
		{"extraEnv", map[string]any{"extraEnv": []any{map[string]any{"name": "GOMEMLIMIT", "value": "400MiB"}}}, []string{"400MiB"}},
	} {
		if got := env(tc.vals); !slices.Equal(got, tc.want) {
			t.Errorf("%s: GOMEMLIMIT %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := renderChart(t, defaultRelease, limits("500M")); err == nil || !strings.Contains(err.Error(), "goMemLimit") {
		t.Errorf("a memory limit of 500M: render error %v, want one naming goMemLimit", err)
	}
}
