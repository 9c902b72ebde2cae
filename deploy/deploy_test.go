package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/drainer-io/drainer/config"
	// The adapter types the config check knows, as `drainer check` has them.
	_ "github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
)

var update = flag.Bool("update", false, "rewrite "+prometheusRuleFile+" from "+rulesSource)

const (
	kustomizationFile  = "kustomization.yaml"
	secretExampleFile  = "secret.example.yaml"
	prometheusRuleFile = "prometheusrule.yaml"
	rulesSource        = "../dashboards/alerts.rules.yaml"
	dockerfile         = "../Dockerfile"
	imageRepo          = "ghcr.io/drainer-io/drainer"
	// Defaults of `drainer run` (docs/reference.md §3), used when the args omit the flag.
	defaultMetricsAddr     = ":9753"
	defaultShutdownTimeout = 30 * time.Second
	defaultSchema          = "drainer"
	// graceMargin is the least time between the end of --shutdown-timeout
	// and SIGKILL: drainer cancels the calls still under way and writes
	// their rows back in that window.
	graceMargin = 10 * time.Second
)

// --- Go mirrors of the custom resources (only the fields used here;
// TestCustomResourcesMatchCRDSchemas checks every field exists in the CRD). ---

type scaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				// KEDA embeds the HPA's own behavior type.
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type       string                         `json:"type"`
			Name       string                         `json:"name,omitempty"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
			Metadata   map[string]string              `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			HonorLabels   bool   `json:"honorLabels,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// kustomization mirrors the kustomize fields used in kustomization.yaml.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// customKinds are decoded into the mirror types above, not the scheme.
var customKinds = map[string]func() any{
	"keda.sh/v1alpha1, Kind=ScaledObject":                 func() any { return new(scaledObject) },
	"monitoring.coreos.com/v1, Kind=ServiceMonitor":       func() any { return new(serviceMonitor) },
	"monitoring.coreos.com/v1, Kind=PrometheusRule":       func() any { return new(prometheusRule) },
	"kustomize.config.k8s.io/v1beta1, Kind=Kustomization": func() any { return new(kustomization) },
}

// --- loading ---

// doc is one YAML document of a manifest file.
type doc struct {
	where string // file, or file#N for the Nth document
	yaml  []byte
	json  []byte
	gvk   string // "group/version, Kind=Kind" as in schema.GroupVersionKind.String
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func readDocs(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifest (%v)", err)
	}
	var docs []doc
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, splitDocs(t, f, data)...)
	}
	return docs
}

// splitDocs splits the YAML documents of one file (or rendered template),
// named f in errors.
func splitDocs(t *testing.T, f string, data []byte) []doc {
	t.Helper()
	var docs []doc
	parts := docSeparator.Split(string(data), -1)
	for i, part := range parts {
		where := f
		if len(parts) > 1 {
			where = fmt.Sprintf("%s#%d", f, i)
		}
		j, err := yaml.YAMLToJSONStrict([]byte(part))
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if string(j) == "null" {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil || tm.Kind == "" || tm.APIVersion == "" {
			t.Errorf("%s: no apiVersion and kind (%v)", where, err)
			continue
		}
		docs = append(docs, doc{where, []byte(part), j, tm.GroupVersionKind().String()})
	}
	return docs
}

// strictJSON decodes JSON into v, refusing unknown fields and trailing data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

// manifests is every object of deploy/, decoded.
type manifests struct {
	kustomization  *kustomization
	namespace      *corev1.Namespace
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret // secret.example.yaml
	deployment     *appsv1.Deployment
	service        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	scaledObject   *scaledObject
	serviceMonitor *serviceMonitor
	prometheusRule *prometheusRule
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decode decodes one document strictly: built-in kinds into the Kubernetes
// API types of client-go's scheme, the others into the mirror types.
func decode(d doc) (any, error) {
	if mk, ok := customKinds[d.gvk]; ok {
		v := mk()
		return v, strictJSON(d.json, v)
	}
	obj, _, err := strictDecoder.Decode(d.yaml, nil, nil)
	return obj, err
}

func load(t *testing.T) *manifests {
	t.Helper()
	m := assemble(t, readDocs(t))
	for name, v := range map[string]any{
		"Kustomization": m.kustomization, "Namespace": m.namespace, "ConfigMap": m.configMap,
		"Secret": m.secret, "Deployment": m.deployment, "Service": m.service,
		"PodDisruptionBudget": m.pdb, "ScaledObject": m.scaledObject,
		"ServiceMonitor": m.serviceMonitor, "PrometheusRule": m.prometheusRule,
	} {
		if reflect.ValueOf(v).IsNil() {
			t.Errorf("no %s manifest", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// assemble decodes docs strictly into a manifests, at most one of each kind.
func assemble(t *testing.T, docs []doc) *manifests {
	t.Helper()
	m := &manifests{}
	for _, d := range docs {
		obj, err := decode(d)
		if err != nil {
			t.Errorf("%s: %v", d.where, err)
			continue
		}
		var dst any
		switch obj.(type) {
		case *kustomization:
			dst = &m.kustomization
		case *corev1.Namespace:
			dst = &m.namespace
		case *corev1.ConfigMap:
			dst = &m.configMap
		case *corev1.Secret:
			dst = &m.secret
		case *appsv1.Deployment:
			dst = &m.deployment
		case *corev1.Service:
			dst = &m.service
		case *policyv1.PodDisruptionBudget:
			dst = &m.pdb
		case *scaledObject:
			dst = &m.scaledObject
		case *serviceMonitor:
			dst = &m.serviceMonitor
		case *prometheusRule:
			dst = &m.prometheusRule
		default:
			t.Errorf("%s: %s has no check in deploy_test.go: add one", d.where, d.gvk)
			continue
		}
		p := reflect.ValueOf(dst).Elem()
		if !p.IsNil() {
			t.Errorf("%s: a second %s: the checks expect one", d.where, d.gvk)
		}
		p.Set(reflect.ValueOf(obj))
	}
	return m
}

// --- helpers ---

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func container(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// checkGoMemLimit: docs/operating.md (Memory) asks for GOMEMLIMIT a little
// under the container's memory limit, so that the collector works harder
// before the kernel would kill the process: between 80% and 95% of it.
func checkGoMemLimit(t *testing.T, c *corev1.Container) {
	t.Helper()
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Errorf("container %s: no memory limit (docs/operating.md sizes one)", c.Name)
		return
	}
	var v string
	n := 0
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			v, n = e.Value, n+1
		}
	}
	if n != 1 {
		t.Errorf("container %s: GOMEMLIMIT set %d times, want once (a little under the memory limit %s)", c.Name, n, lim.String())
		return
	}
	b, err := goMemLimitBytes(v)
	if err != nil {
		t.Errorf("container %s: GOMEMLIMIT %q: %v", c.Name, v, err)
		return
	}
	if r := float64(b) / float64(lim.Value()); r < 0.8 || r > 0.95 {
		t.Errorf("container %s: GOMEMLIMIT %s is %.0f%% of the memory limit %s, want 80%% to 95%%", c.Name, v, 100*r, lim.String())
	}
}

// goMemLimitBytes parses a GOMEMLIMIT value as the Go runtime does: a
// number of bytes with an optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimitBytes(v string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			return n * u.mult, err
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

// metricsPort is the port of `drainer run`'s --metrics-addr.
func metricsPort(t *testing.T, c *corev1.Container) int32 {
	t.Helper()
	addr, ok := flagValue(c.Args, "metrics-addr")
	if !ok {
		addr = defaultMetricsAddr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", addr, err)
	}
	return int32(n)
}

// portNumber resolves a probe or Service target port against c's ports.
func portNumber(c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// envValue resolves a container env var the way the kubelet would, from
// the manifests (the Secret from secret.example.yaml).
func envValue(m *manifests, e corev1.EnvVar) (string, error) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, nil
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		if ref.Name != m.secret.Name {
			return "", fmt.Errorf("env %s: Secret %q is not the one of %s (%q)", e.Name, ref.Name, secretExampleFile, m.secret.Name)
		}
		if v, ok := m.secret.StringData[ref.Key]; ok {
			return v, nil
		}
		if v, ok := m.secret.Data[ref.Key]; ok {
			return string(v), nil
		}
		return "", fmt.Errorf("env %s: key %q is not in %s", e.Name, ref.Key, secretExampleFile)
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref.Name != m.configMap.Name {
			return "", fmt.Errorf("env %s: ConfigMap %q unknown", e.Name, ref.Name)
		}
		v, ok := m.configMap.Data[ref.Key]
		if !ok {
			return "", fmt.Errorf("env %s: key %q is not in ConfigMap %s", e.Name, ref.Key, ref.Name)
		}
		return v, nil
	default:
		return "downward-api", nil
	}
}

func selects(sel map[string]string, lbls map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lbls[k] != v {
			return false
		}
	}
	return true
}

// exportedMetrics returns the names the daemon's registry exports (built as
// the daemon builds it); histograms under their base name.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	drainer.NewMetrics(reg, "test").InitAdapters([]string{"a"})
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if sm := fqName.FindStringSubmatch(d.String()); sm != nil {
			names[sm[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("no metric registered by drainer.NewMetrics")
	}
	return names
}

// selectors parses a PromQL expression and returns its vector selectors.
func selectors(expr string) ([]*parser.VectorSelector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}

func matcher(vs *parser.VectorSelector, name string) (string, bool) {
	for _, m := range vs.LabelMatchers {
		if m.Name == name && m.Type == labels.MatchEqual {
			return m.Value, true
		}
	}
	return "", false
}

// --- tests ---

func TestManifestsDecodeStrictly(t *testing.T) {
	load(t)
}

// TestStrictDecodingRejectsTypos proves the decoding above is strict: a
// misspelt field or a wrong type fails, for built-in and custom kinds.
func TestStrictDecodingRejectsTypos(t *testing.T) {
	schemas := loadCRDSchemas(t)
	for _, tc := range []struct{ name, yaml string }{
		{"unknown field in a Deployment", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      terminationGracePeriodSecond: 45
      containers: [{name: c, image: i}]
`},
		{"wrong type in a Deployment", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  replicas: two
  selector: {matchLabels: {a: b}}
  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}
`},
		{"duplicate key in a Service", `
apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  ports: [{port: 1}]
  ports: [{port: 2}]
`},
		{"unknown field in a ScaledObject", `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: x}
spec:
  scaleTargetRef: {name: d}
  minReplicas: 1
  triggers: [{type: prometheus, metadata: {query: up}}]
`},
		{"unknown field in a ServiceMonitor endpoint", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  endpoints: [{port: metrics, intervall: 30s}]
`},
		{"unknown field in metadata of a custom resource", `
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: x, label: {a: b}}
spec: {groups: []}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := yaml.YAMLToJSONStrict([]byte(tc.yaml))
			if err != nil {
				return // refused while reading the YAML already
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(j, &tm); err != nil {
				t.Fatal(err)
			}
			d := doc{tc.name, []byte(tc.yaml), j, tm.GroupVersionKind().String()}
			if _, err := decode(d); err == nil {
				t.Errorf("decoded without error")
			}
			if s, ok := schemas[d.gvk]; ok {
				var v any
				_ = json.Unmarshal(j, &v)
				if errs := validateSchema("", v, s.Schema); len(errs) == 0 && !strings.Contains(tc.name, "metadata") {
					t.Errorf("the CRD schema validation accepted it")
				}
			}
		})
	}
}

func TestKustomization(t *testing.T) {
	m := load(t)
	k := m.kustomization
	listed := map[string]bool{}
	for _, r := range k.Resources {
		if listed[r] {
			t.Errorf("%s: %s listed twice", kustomizationFile, r)
		}
		listed[r] = true
		if _, err := os.Stat(r); err != nil {
			t.Errorf("%s: resource %s: %v", kustomizationFile, r, err)
		}
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		switch {
		case f == kustomizationFile:
		case f == secretExampleFile:
			if listed[f] {
				t.Errorf("%s lists %s: its placeholders must never be applied", kustomizationFile, f)
			}
		case !listed[f]:
			t.Errorf("%s is not listed in %s", f, kustomizationFile)
		}
	}
	if k.Namespace == "" || k.Namespace != m.namespace.Name {
		t.Errorf("%s: namespace %q, want the Namespace of namespace.yaml (%q)", kustomizationFile, k.Namespace, m.namespace.Name)
	}
	var tagged bool
	for _, im := range k.Images {
		if im.Name == imageRepo && (im.NewTag != "" || im.Digest != "") {
			tagged = true
		}
	}
	if !tagged {
		t.Errorf("%s: no images entry setting the tag of %s", kustomizationFile, imageRepo)
	}
	pod := m.deployment.Spec.Template.Spec
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if repo, _, _ := strings.Cut(c.Image, ":"); repo != imageRepo && !strings.HasPrefix(c.Image, imageRepo+":") {
			t.Errorf("container %s: image %q is not %s (the kustomization's images entry would not set it)", c.Name, c.Image, imageRepo)
		}
	}
}

func TestDeployment(t *testing.T) {
	checkDeployment(t, load(t))
}

// checkDeployment checks the Deployment of m (kustomize's or the chart's).
func checkDeployment(t *testing.T, m *manifests) {
	t.Helper()
	d := m.deployment
	pod := d.Spec.Template.Spec
	run := container(t, pod.Containers, "drainer")

	if len(run.Args) == 0 || run.Args[0] != "run" {
		t.Errorf("drainer container: args %q, want `run --config …`", run.Args)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("enableServiceLinks must be false: Service %q would inject DRAINER_* variables, which the CLI reads as flags", m.service.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken should be false: drainer does not use the Kubernetes API")
	}

	checkGoMemLimit(t, run)

	// Grace period versus --shutdown-timeout.
	timeout := defaultShutdownTimeout
	if v, ok := flagValue(run.Args, "shutdown-timeout"); ok {
		var err error
		if timeout, err = time.ParseDuration(v); err != nil {
			t.Fatalf("--shutdown-timeout %q: %v", v, err)
		}
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Errorf("terminationGracePeriodSeconds unset (Kubernetes' 30s default is not above --shutdown-timeout %s)", timeout)
	} else if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace < timeout+graceMargin {
		t.Errorf("terminationGracePeriodSeconds %s must exceed --shutdown-timeout %s by at least %s", grace, timeout, graceMargin)
	}

	// Probes on the metrics port.
	port := metricsPort(t, run)
	var named bool
	for _, cp := range run.Ports {
		if cp.ContainerPort == port && cp.Name == "metrics" {
			named = true
		}
	}
	if !named {
		t.Errorf("drainer container: no port named metrics with containerPort %d (--metrics-addr)", port)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", run.ReadinessProbe, "/readyz"}, {"livenessProbe", run.LivenessProbe, "/healthz"}} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("%s: want an httpGet on %s", p.name, p.path)
		case p.probe.HTTPGet.Path != p.path:
			t.Errorf("%s: path %q, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		case portNumber(run, p.probe.HTTPGet.Port) != port:
			t.Errorf("%s: port %s is not the metrics port %d", p.name, p.probe.HTTPGet.Port.String(), port)
		}
	}

	// Rolling updates.
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy %q, want RollingUpdate", d.Spec.Strategy.Type)
	}
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("selector %v does not match the pod labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}

	// Security and resources, every container.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext: want runAsNonRoot and seccompProfile RuntimeDefault")
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s: no securityContext", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: readOnlyRootFilesystem must be true", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: allowPrivilegeEscalation must be false", c.Name)
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("container %s: runAsNonRoot must be true", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Errorf("container %s: capabilities must drop ALL", c.Name)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				t.Errorf("container %s: no %s request", c.Name, res)
			}
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("container %s: no memory limit", c.Name)
		}
		for _, e := range c.Env {
			if _, err := envValue(m, e); err != nil {
				t.Errorf("container %s: %v", c.Name, err)
			}
		}
	}

	// Migrations: an initContainer running `drainer migrate` on the same
	// database and schema as the daemon.
	mig := container(t, pod.InitContainers, "migrate")
	if len(mig.Args) == 0 || mig.Args[0] != "migrate" {
		t.Errorf("migrate initContainer: args %q, want `migrate`", mig.Args)
	}
	dbEnv := func(c *corev1.Container) string {
		for _, e := range c.Env {
			if e.Name == "DRAINER_DATABASE_URL" {
				v, _ := envValue(m, e)
				return v
			}
		}
		v, _ := flagValue(c.Args, "database-url")
		return v
	}
	if a, b := dbEnv(mig), dbEnv(run); a == "" || a != b {
		t.Errorf("migrate and run must get the same database URL (DRAINER_DATABASE_URL); got %q and %q", a, b)
	}
	schemaOf := func(c *corev1.Container) string {
		if v, ok := flagValue(c.Args, "schema"); ok {
			return v
		}
		for _, e := range c.Env {
			if e.Name == "DRAINER_SCHEMA" {
				return e.Value
			}
		}
		return defaultSchema
	}
	if a, b := schemaOf(mig), schemaOf(run); a != b {
		t.Errorf("migrate works on schema %q, run on %q", a, b)
	}
}

// TestConfigMapConfig loads the ConfigMap's config file with drainer's own
// loader (check mode), resolving ${env:X} from the container's env (values
// from secret.example.yaml): every reference must be provided.
func TestConfigMapConfig(t *testing.T) {
	checkConfigMapConfig(t, load(t))
}

// checkConfigMapConfig is TestConfigMapConfig on m.
func checkConfigMapConfig(t *testing.T, m *manifests) {
	t.Helper()
	pod := m.deployment.Spec.Template.Spec
	run := container(t, pod.Containers, "drainer")

	cfgPath, ok := flagValue(run.Args, "config")
	if !ok {
		t.Fatalf("drainer container: no --config in args %q", run.Args)
	}
	// The config file must come from the ConfigMap's volume.
	var data string
	for _, vm := range run.VolumeMounts {
		if path.Dir(cfgPath) != path.Clean(vm.MountPath) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				if v.ConfigMap.Name != m.configMap.Name {
					t.Fatalf("volume %s mounts ConfigMap %q, not %q", v.Name, v.ConfigMap.Name, m.configMap.Name)
				}
				data, ok = m.configMap.Data[path.Base(cfgPath)]
				if !ok {
					t.Fatalf("ConfigMap %s has no key %s (--config %s)", m.configMap.Name, path.Base(cfgPath), cfgPath)
				}
			}
		}
	}
	if data == "" {
		t.Fatalf("--config %s is not in a volume mounted from ConfigMap %s", cfgPath, m.configMap.Name)
	}

	env := map[string]string{}
	for _, e := range run.Env {
		v, err := envValue(m, e)
		if err != nil {
			t.Error(err)
		}
		env[e.Name] = v
	}
	var looked []string
	cfg, err := config.Parse(path.Base(cfgPath), []byte(data), config.LoadOptions{
		Check: true,
		LookupEnv: func(name string) (string, bool) {
			looked = append(looked, name)
			v, ok := env[name]
			return v, ok
		},
		ReadFile: func(p string) ([]byte, error) {
			t.Errorf("config reads ${file:%s}: mount it and extend this test", p)
			return nil, os.ErrNotExist
		},
	})
	if err != nil {
		t.Fatalf("the ConfigMap's config does not load:\n%v", err)
	}
	for _, w := range cfg.Warnings {
		t.Errorf("config warning: %s", w)
	}
	if len(looked) == 0 {
		t.Errorf("the config references no ${env:…}: where do its secrets come from?")
	}
	for _, name := range looked {
		if _, ok := env[name]; !ok {
			t.Errorf("config references ${env:%s} but the drainer container has no env var %s", name, name)
		}
	}
	// Every adapter the config routes to is configured (the loader checks
	// it); every Secret-backed env var is used by the config or the CLI.
	for _, e := range run.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !slices.Contains(looked, e.Name) && !strings.HasPrefix(e.Name, "DRAINER_") {
			t.Errorf("env %s (from the Secret) is not referenced by the config", e.Name)
		}
	}
}

func TestServiceMonitoringAndDisruptions(t *testing.T) {
	checkServiceMonitoringAndDisruptions(t, load(t))
}

// checkServiceMonitoringAndDisruptions checks the Service, and the
// ServiceMonitor and PodDisruptionBudget when m has them.
func checkServiceMonitoringAndDisruptions(t *testing.T, m *manifests) {
	t.Helper()
	podLabels := m.deployment.Spec.Template.Labels
	run := container(t, m.deployment.Spec.Template.Spec.Containers, "drainer")
	port := metricsPort(t, run)

	svc := m.service
	if !selects(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	var svcPort string
	for _, p := range svc.Spec.Ports {
		if portNumber(run, p.TargetPort) == port {
			svcPort = p.Name
		}
	}
	if svcPort == "" {
		t.Fatalf("Service %s has no port targeting the metrics port %d", svc.Name, port)
	}

	if sm := m.serviceMonitor; sm != nil {
		checkServiceMonitor(t, sm, svc, svcPort)
	}
	if m.pdb == nil {
		return
	}
	if !selects(m.pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods %v", m.pdb.Spec.Selector.MatchLabels, podLabels)
	}
	if m.pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: use maxUnavailable; minAvailable blocks node drains when fewer replicas run")
	}
}

// checkServiceMonitor checks sm scrapes svc's metrics port, named svcPort.
func checkServiceMonitor(t *testing.T, sm *serviceMonitor, svc *corev1.Service, svcPort string) {
	t.Helper()
	if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select Service labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("ServiceMonitor: no endpoint")
	}
	for _, e := range sm.Spec.Endpoints {
		if e.Port != svcPort {
			t.Errorf("ServiceMonitor endpoint port %q, want the Service's metrics port %q", e.Port, svcPort)
		}
		if e.Path != "" && e.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint path %q, want /metrics", e.Path)
		}
	}
	// The alert rules and the KEDA query name the scrape job: the Service
	// name, unless the ServiceMonitor sets jobLabel.
	if sm.Spec.JobLabel != "" {
		t.Errorf("ServiceMonitor jobLabel set: the rules expect job=%q (the Service name)", svc.Name)
	}
}

// promTriggerKeys are the metadata keys of KEDA's prometheus scaler
// (pkg/scalers/prometheus_scaler.go and pkg/scalers/authentication at v2.20.2).
var promTriggerKeys = []string{
	"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
	"namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "awsRegion",
	"timeout", "identityOwner", "authModes",
}

func TestScaledObject(t *testing.T) {
	m := load(t)
	checkScaledObject(t, m, m.kustomization.Namespace)
}

// checkScaledObject checks m's ScaledObject, for objects deployed in namespace.
func checkScaledObject(t *testing.T, m *manifests, namespace string) {
	t.Helper()
	so := m.scaledObject
	ref := so.Spec.ScaleTargetRef
	if ref.Name != m.deployment.Name || (ref.Kind != "" && ref.Kind != "Deployment") {
		t.Errorf("scaleTargetRef %+v, want Deployment %s", ref, m.deployment.Name)
	}
	if m.deployment.Spec.Replicas != nil {
		t.Errorf("Deployment sets replicas while KEDA's HPA owns them: every apply would reset the count")
	}
	minR, maxR := int32(0), int32(100)
	if so.Spec.MinReplicaCount != nil {
		minR = *so.Spec.MinReplicaCount
	}
	if so.Spec.MaxReplicaCount != nil {
		maxR = *so.Spec.MaxReplicaCount
	}
	if minR < 1 {
		t.Errorf("minReplicaCount %d: a Prometheus trigger cannot scale up from 0 (no replica, no metric)", minR)
	}
	if minR > maxR {
		t.Errorf("minReplicaCount %d > maxReplicaCount %d", minR, maxR)
	}
	exported := exportedMetrics(t)
	for i, tr := range so.Spec.Triggers {
		where := fmt.Sprintf("trigger %d (%s)", i, tr.Type)
		if tr.Type != "prometheus" {
			t.Errorf("%s: only prometheus triggers are checked here", where)
			continue
		}
		for k := range tr.Metadata {
			if !slices.Contains(promTriggerKeys, k) {
				t.Errorf("%s: unknown metadata key %q", where, k)
			}
		}
		for _, k := range []string{"serverAddress", "query", "threshold"} {
			if tr.Metadata[k] == "" {
				t.Errorf("%s: metadata.%s is required", where, k)
			}
		}
		if th, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil || th <= 0 {
			t.Errorf("%s: threshold %q is not a positive number", where, tr.Metadata["threshold"])
		}
		sels, err := selectors(tr.Metadata["query"])
		if err != nil {
			t.Errorf("%s: query does not parse: %v", where, err)
			continue
		}
		if err := sumsOverDatabases(tr.Metadata["query"]); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		for _, vs := range sels {
			if !exported[vs.Name] {
				t.Errorf("%s: metric %s is not exported by the daemon", where, vs.Name)
			}
			if ns, _ := matcher(vs, "namespace"); ns != namespace {
				t.Errorf("%s: %s must select namespace=%q (where the objects are deployed), got %q", where, vs.Name, namespace, ns)
			}
			if job, _ := matcher(vs, "job"); job != m.service.Name {
				t.Errorf("%s: %s must select job=%q (the scraped Service), got %q", where, vs.Name, m.service.Name, job)
			}
		}
	}
}

// sumsOverDatabases checks that a scaling query reads the snapshot gauges
// (drainer_outbox_rows, drainer_unrouted_rows: one copy per replica draining
// a database) as the max per database, summed over databases, so the fleet
// scales on its total backlog whether it drains one database or many.
func sumsOverDatabases(query string) error {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(query)
	if err != nil {
		return err
	}
	var problems []string
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok || (vs.Name != "drainer_outbox_rows" && vs.Name != "drainer_unrouted_rows") {
			return nil
		}
		var aggs []*parser.AggregateExpr
		for i := len(path) - 1; i >= 0; i-- {
			if a, ok := path[i].(*parser.AggregateExpr); ok {
				aggs = append(aggs, a)
			}
		}
		if len(aggs) < 2 || aggs[0].Op != parser.MAX || aggs[0].Without || !slices.Contains(aggs[0].Grouping, "database") ||
			aggs[1].Op != parser.SUM || len(aggs[1].Grouping) > 0 {
			problems = append(problems, vs.Name+" must be read as sum(max by (database, …) (…)): the backlog of every database, each counted once")
		}
		return nil
	})
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// TestCustomResourcesMatchCRDSchemas validates the custom resources against
// the CRD schemas in testdata/crds and checks the Go mirror types use only
// fields those schemas have.
func TestCustomResourcesMatchCRDSchemas(t *testing.T) {
	schemas := loadCRDSchemas(t)
	checked := 0
	for _, d := range readDocs(t) {
		s, ok := schemas[d.gvk]
		if !ok {
			if d.gvk != "kustomize.config.k8s.io/v1beta1, Kind=Kustomization" && customKinds[d.gvk] != nil {
				t.Errorf("%s: no CRD schema for %s in testdata/crds", d.where, d.gvk)
			}
			continue
		}
		var v any
		if err := json.Unmarshal(d.json, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range validateSchema(d.gvk, v, s.Schema) {
			t.Errorf("%s: %s", d.where, e)
		}
		checked++
	}
	if checked != 3 {
		t.Errorf("%d custom resources checked against a CRD schema, want 3 (ScaledObject, ServiceMonitor, PrometheusRule)", checked)
	}
	for gvk, mk := range customKinds {
		s, ok := schemas[gvk]
		if !ok {
			continue
		}
		for _, e := range mirrorFieldsInSchema(s.Kind, reflect.TypeOf(mk()), s.Schema) {
			t.Error(e)
		}
	}
}

// prometheusRuleHeader precedes the rule file, indented under spec:, in
// prometheusrule.yaml.
const prometheusRuleHeader = `# GENERATED from dashboards/alerts.rules.yaml: edit that file, then run
#   go test ./deploy -run TestPrometheusRule -update
# The rules as a prometheus-operator PrometheusRule. Your Prometheus's
# ruleSelector may require an extra label (e.g. release: prometheus).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: drainer
  labels:
    app.kubernetes.io/name: drainer
spec:
`

func renderPrometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	for line := range strings.Lines(string(rules)) {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line)
	}
	return b.Bytes()
}

func TestPrometheusRule(t *testing.T) {
	rules, err := os.ReadFile(rulesSource)
	if err != nil {
		t.Fatal(err)
	}
	want := renderPrometheusRule(rules)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go test ./deploy -run TestPrometheusRule -update", prometheusRuleFile, rulesSource)
	}

	checkRuleJobs(t, load(t))
}

// checkRuleJobs checks the job matchers of m's rules name the scraped Service.
// runbookRef finds the job or Deployment an alert's text names.
var runbookRef = regexp.MustCompile(`(job=|deploy/)([a-z0-9-]+)`)

func checkRuleJobs(t *testing.T, m *manifests) {
	t.Helper()
	n := 0
	for _, g := range m.prometheusRule.Spec.Groups {
		for _, r := range g.Rules {
			n++
			sels, err := selectors(r.Expr)
			if err != nil {
				t.Errorf("rule %s: %v", r.Alert+r.Record, err)
				continue
			}
			for _, vs := range sels {
				if job, ok := matcher(vs, "job"); ok && job != m.service.Name {
					t.Errorf("rule %s: job=%q, but the scrape job is the Service name %q", r.Alert+r.Record, job, m.service.Name)
				}
			}
			// The runbooks name the release's job and Deployment.
			for k, text := range r.Annotations {
				for _, ref := range runbookRef.FindAllStringSubmatch(text, -1) {
					if ref[2] != m.service.Name && ref[2] != m.deployment.Name {
						t.Errorf("rule %s: annotation %s names %s, but the release's job and Deployment are %s", r.Alert+r.Record, k, ref[0], m.service.Name)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("PrometheusRule %s: no rule", m.prometheusRule.Metadata.Name)
	}
}

// TestDockerfile checks the image agrees with the Deployment: the metrics
// port it exposes, the user the pod runs as, the entrypoint the args follow.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	checkImageContract(t, string(data), load(t))
}

// checkImageContract checks m's Deployment against the Dockerfile df.
func checkImageContract(t *testing.T, df string, m *manifests) {
	t.Helper()
	run := container(t, m.deployment.Spec.Template.Spec.Containers, "drainer")
	if port := metricsPort(t, run); !regexp.MustCompile(`(?m)^EXPOSE\s+` + strconv.Itoa(int(port)) + `\b`).MatchString(df) {
		t.Errorf("Dockerfile does not EXPOSE the metrics port %d", port)
	}
	if !regexp.MustCompile(`(?m)^ENTRYPOINT\s+\["/drainer"\]`).MatchString(df) {
		t.Errorf(`Dockerfile: want ENTRYPOINT ["/drainer"] (the Deployment passes only args)`)
	}
	if run.Command != nil {
		t.Errorf("drainer container sets command: keep the image's ENTRYPOINT and pass args")
	}
	psc := m.deployment.Spec.Template.Spec.SecurityContext
	if !regexp.MustCompile(`(?m)^USER\s+(nonroot|65532)`).MatchString(df) || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("Dockerfile USER and the pod's runAsUser must both be distroless nonroot (65532)")
	}
}
