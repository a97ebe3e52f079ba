package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/neptune-cluster/neptune/internal/cli"
	"github.com/neptune-cluster/neptune/internal/version"
)

// drainBound is how long a node's SIGTERM drain may take
// (docs/operations.md); the pod's grace period must exceed it with room
// for the process to exit.
const drainBound = 30

// Sample values the downward API would give a pod.
const (
	namespace = "prod"
	podIP     = "10.1.2.3"
	zone      = "zone-a"
)

// manifests are every object in the YAML files under this directory,
// each decoded strictly into its Kubernetes API type.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
}

// newObject is the API type of each kind the manifests may hold; any
// other kind fails the test.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func load(t *testing.T) *manifests {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	m := &manifests{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			obj, err := decodeStrict([]byte(doc))
			if err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				continue
			}
			switch o := obj.(type) {
			case nil: // only comments
			case *appsv1.StatefulSet:
				m.statefulSets = append(m.statefulSets, o)
			case *appsv1.Deployment:
				m.deployments = append(m.deployments, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *corev1.ConfigMap:
				m.configMaps = append(m.configMaps, o)
			case *corev1.Secret:
				m.secrets = append(m.secrets, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// decodeStrict decodes one YAML document into the API type its
// apiVersion and kind name: duplicate keys, unknown fields, fields
// spelled in another case (which encoding/json would accept and the API
// server would not) and wrongly typed values fail. A document of
// comments only is nil.
func decodeStrict(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if string(bytes.TrimSpace(js)) == "null" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	obj := newObject(tm.APIVersion, tm.Kind)
	if obj == nil {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use", tm.APIVersion, tm.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	// Every key written must come back, in its case, when the object is
	// encoded again.
	back, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var in, out any
	if err := json.Unmarshal(js, &in); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(back, &out); err != nil {
		return nil, err
	}
	if err := keysKept(in, out, tm.Kind); err != nil {
		return nil, err
	}
	return obj, nil
}

func keysKept(in, out any, path string) error {
	switch v := in.(type) {
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: an object, decoded as %T", path, out)
		}
		for k, x := range v {
			y, ok := o[k]
			if !ok {
				if x == nil || fmt.Sprint(x) == "map[]" || fmt.Sprint(x) == "[]" || x == "" || x == false || x == float64(0) {
					continue // an empty value, left out when encoded
				}
				return fmt.Errorf("%s.%s: not a field of the API type (spelling or case)", path, k)
			}
			if err := keysKept(x, y, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(v) {
			return fmt.Errorf("%s: a list, decoded as %T", path, out)
		}
		for i := range v {
			if err := keysKept(v[i], o[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestDecodeStrictRejects: the decoding this test relies on refuses what
// the API server would.
func TestDecodeStrictRejects(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nspec:\n  clusterIp: None\n",                 // case
		"apiVersion: v1\nkind: Service\nspec:\n  publishNotReady: true\n",           // unknown
		"apiVersion: v1\nkind: Service\nspec:\n  ports: [{port: seven}]\n",          // type
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nmetadata: {name: b}\n", // duplicate
		"apiVersion: apps/v1beta1\nkind: StatefulSet\n",                             // version
		"apiVersion: v1\nkind: Pod\n",                                               // kind
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("accepted:\n%s", doc)
		} else {
			t.Logf("%v", err)
		}
	}
	if obj, err := decodeStrict([]byte("# nothing\n")); obj != nil || err != nil {
		t.Errorf("comments only: %v, %v", obj, err)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.statefulSets) != 1 || len(m.deployments) != 1 || len(m.pdbs) != 1 {
		t.Fatalf("want one StatefulSet, one Deployment (the gateway) and one PodDisruptionBudget, got %d, %d, %d",
			len(m.statefulSets), len(m.deployments), len(m.pdbs))
	}
	for _, name := range []string{"neptune-ca", "neptune-keyring"} {
		if m.secret(name) == nil {
			t.Errorf("no Secret %s in the layout", name)
		}
	}
}

func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (m *manifests) configMap(name string) *corev1.ConfigMap {
	for _, c := range m.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (m *manifests) secret(name string) *corev1.Secret {
	for _, s := range m.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// selects reports whether selector matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestStatefulSet: the nodes' StatefulSet, its headless Service and its
// disruption budget fit together.
func TestStatefulSet(t *testing.T) {
	m := load(t)
	sts := m.statefulSets[0]
	spec := sts.Spec.Template.Spec
	labels := sts.Spec.Template.Labels
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	if !selects(sts.Spec.Selector.MatchLabels, labels) {
		t.Errorf("selector %v does not select the pods %v", sts.Spec.Selector.MatchLabels, labels)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: a node is ready only once joined, so pods must start together", sts.Spec.PodManagementPolicy)
	}
	hl := m.service(sts.Spec.ServiceName)
	switch {
	case hl == nil:
		t.Fatalf("no Service %q (serviceName)", sts.Spec.ServiceName)
	case hl.Spec.ClusterIP != corev1.ClusterIPNone:
		t.Errorf("Service %s: clusterIP %q, want None (headless)", hl.Name, hl.Spec.ClusterIP)
	case !hl.Spec.PublishNotReadyAddresses:
		t.Errorf("Service %s: publishNotReadyAddresses must be true: pods find each other before they are ready", hl.Name)
	case !selects(hl.Spec.Selector, labels):
		t.Errorf("Service %s: selector %v does not select the pods %v", hl.Name, hl.Spec.Selector, labels)
	}
	pdb := m.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, minAvailable %v; want maxUnavailable 1", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, labels) {
		t.Errorf("PodDisruptionBudget: selector does not select the pods %v", labels)
	}
	if g := grace(spec); g < drainBound+10 {
		t.Errorf("terminationGracePeriodSeconds %d: want at least %d s, above the node's drain bound", g, drainBound+10)
	}
	var claims []string
	for _, c := range sts.Spec.VolumeClaimTemplates {
		claims = append(claims, c.Name)
	}
	pod := checkPod(t, "StatefulSet "+sts.Name, sts.Name+"-0", spec, m, claims)

	node := container(t, spec.Containers, "node")
	fc, err := cli.NodeConfigFor(node.Args[1:], pod.env(t, node))
	if err != nil {
		t.Fatalf("the node would not start: %v", err)
	}
	fqdn := func(host string) string { return host + "." + namespace + ".svc.cluster.local" }
	if fc.ID != pod.name {
		t.Errorf("id %q, want the pod's name %q", fc.ID, pod.name)
	}
	if fc.Host != "0.0.0.0" {
		t.Errorf("host %q, want 0.0.0.0", fc.Host)
	}
	if want := fqdn(pod.name + "." + hl.Name); fc.Advertise != want {
		t.Errorf("advertise %q, want the pod's stable name %q", fc.Advertise, want)
	}
	if want := net.JoinHostPort(fqdn(hl.Name), strconv.Itoa(fc.GossipPort)); !slices.Equal(fc.Join, []string{want}) {
		t.Errorf("join %v, want the headless Service [%s]", fc.Join, want)
	}
	if fc.Zone != zone {
		t.Errorf("zone %q, want the pod's zone label", fc.Zone)
	}
	_, metricsPort, err := net.SplitHostPort(fc.Metrics)
	if err != nil {
		t.Fatalf("metrics %q: %v", fc.Metrics, err)
	}
	// The node's listeners are the container's ports, and the headless
	// Service's.
	for _, l := range []struct {
		port  string
		names []string
		proto corev1.Protocol
	}{
		{strconv.Itoa(fc.GossipPort), []string{"gossip-tcp"}, corev1.ProtocolTCP},
		{strconv.Itoa(fc.GossipPort), []string{"gossip-udp"}, corev1.ProtocolUDP},
		{strconv.Itoa(fc.RPCPort), []string{"rpc"}, corev1.ProtocolTCP},
		{strconv.Itoa(fc.PollPort), []string{"poll"}, corev1.ProtocolUDP},
		{metricsPort, []string{"metrics"}, corev1.ProtocolTCP},
	} {
		p := containerPort(node, l.names[0])
		if p == nil || strconv.Itoa(int(p.ContainerPort)) != l.port || p.Protocol != l.proto {
			t.Errorf("container port %s: %+v, want %s/%s", l.names[0], p, l.port, l.proto)
		}
		if !slices.ContainsFunc(hl.Spec.Ports, func(sp corev1.ServicePort) bool {
			return sp.TargetPort.String() == l.names[0] && strconv.Itoa(int(sp.Port)) == l.port && sp.Protocol == l.proto
		}) {
			t.Errorf("Service %s has no port %s/%s to %s", hl.Name, l.port, l.proto, l.names[0])
		}
	}
	if fc.GossipPort == 0 || fc.RPCPort == 0 || fc.PollPort == 0 {
		t.Errorf("ports must be fixed, not picked at start: gossip %d rpc %d poll %d", fc.GossipPort, fc.RPCPort, fc.PollPort)
	}
	checkProbes(t, node, metricsPort)
	if fc.DataDir == "" || !pod.mountedFrom(node, fc.DataDir, "claim", "data") {
		t.Errorf("data_dir %q is not on the volumeClaimTemplate", fc.DataDir)
	}
	if !pod.mountedFrom(node, fc.Security.Keyring, "secret", "neptune-keyring") {
		t.Errorf("keyring %q is not in the neptune-keyring Secret", fc.Security.Keyring)
	}
	pod.checkCertificate(t, node, fc.Security.TLSDir, "--node", fc.ID)
	// The replication's initial nodes are pods of this StatefulSet.
	for _, s := range fc.Services {
		if s.Replication == nil {
			continue
		}
		for _, n := range s.Replication.Nodes {
			i, err := strconv.Atoi(strings.TrimPrefix(n, sts.Name+"-"))
			if !strings.HasPrefix(n, sts.Name+"-") || err != nil || i < 0 || i >= int(*sts.Spec.Replicas) {
				t.Errorf("service %s: replication.nodes names %q, not one of the StatefulSet's %d pods", s.Name, n, *sts.Spec.Replicas)
			}
		}
		if s.Replication.Degree > int(*sts.Spec.Replicas) {
			t.Errorf("service %s: degree %d above the StatefulSet's %d pods", s.Name, s.Replication.Degree, *sts.Spec.Replicas)
		}
	}
}

// TestGateway: the gateway's Deployment would start, and its ports,
// probes, certificate and Service fit together.
func TestGateway(t *testing.T) {
	m := load(t)
	d := m.deployments[0]
	spec := d.Spec.Template.Spec
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the pods %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	pod := checkPod(t, "Deployment "+d.Name, d.Name+"-5d8f7c9b4-x2x7q", spec, m, nil)
	gw := container(t, spec.Containers, "gateway")
	cfg, extra, err := cli.GatewayConfigFor(gw.Args[1:], pod.env(t, gw))
	if err != nil {
		t.Fatalf("the gateway would not start: %v", err)
	}
	hl := m.service(m.statefulSets[0].Spec.ServiceName)
	if hl == nil {
		t.Fatal("no headless Service")
	}
	var gossip int32
	for _, p := range hl.Spec.Ports {
		if p.TargetPort.String() == "gossip-tcp" {
			gossip = p.Port
		}
	}
	if want := net.JoinHostPort(hl.Name+"."+namespace+".svc.cluster.local", strconv.Itoa(int(gossip))); !slices.Equal(cfg.Join, []string{want}) {
		t.Errorf("join %v, want [%s]", cfg.Join, want)
	}
	if extra.Advertise != podIP {
		t.Errorf("advertise %q, want the pod's IP", extra.Advertise)
	}
	if drain := time.Duration(cfg.WithDefaults().Drain); int64(drain.Seconds()) >= grace(spec) {
		t.Errorf("terminationGracePeriodSeconds %d does not exceed the drain %v", grace(spec), drain)
	}
	_, httpPort, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	_, metricsPort, err := net.SplitHostPort(cfg.Metrics)
	if err != nil {
		t.Fatalf("metrics %q: the probes need it: %v", cfg.Metrics, err)
	}
	for name, port := range map[string]string{"http": httpPort, "metrics": metricsPort} {
		if p := containerPort(gw, name); p == nil || strconv.Itoa(int(p.ContainerPort)) != port {
			t.Errorf("container port %s: %+v, want %s", name, p, port)
		}
	}
	checkProbes(t, gw, metricsPort)
	role, name, _ := strings.Cut(extra.Security.Cert, "/")
	if role != "gateway" {
		t.Errorf("cert %q: want a gateway certificate", extra.Security.Cert)
	}
	pod.checkCertificate(t, gw, extra.Security.Dir, "--gateway", name)
	if !pod.mountedFrom(gw, extra.Security.KeyringFile, "secret", "neptune-keyring") {
		t.Errorf("keyring %q is not in the neptune-keyring Secret", extra.Security.KeyringFile)
	}
	svc := m.service(d.Name)
	if svc == nil || !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Fatalf("no Service %s selecting the gateway", d.Name)
	}
	for _, p := range svc.Spec.Ports {
		if containerPort(gw, p.TargetPort.String()) == nil {
			t.Errorf("Service %s: targetPort %s is no container port", svc.Name, p.TargetPort.String())
		}
	}
}

// grace is the pod's terminationGracePeriodSeconds (Kubernetes' default
// 30 when unset).
func grace(spec corev1.PodSpec) int64 {
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return 30
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

func containerPort(c *corev1.Container, name string) *corev1.ContainerPort {
	for i := range c.Ports {
		if c.Ports[i].Name == name {
			return &c.Ports[i]
		}
	}
	return nil
}

// checkProbes: liveness (and startup, if any) on /livez, readiness on
// /readyz, all on the metrics listener the process serves them on.
func checkProbes(t *testing.T, c *corev1.Container, metricsPort string) {
	t.Helper()
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"liveness", "/livez", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}, {"startup", "/livez", c.StartupProbe}} {
		if p.kind == "startup" && p.probe == nil {
			continue // optional
		}
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no %s HTTP probe", c.Name, p.kind)
			continue
		}
		g := p.probe.HTTPGet
		port := g.Port.String()
		if cp := containerPort(c, port); cp != nil {
			port = strconv.Itoa(int(cp.ContainerPort))
		}
		if g.Path != p.path || port != metricsPort || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
			t.Errorf("%s: %s probe %s %s port %s, want HTTP %s on the metrics port %s", c.Name, p.kind, g.Scheme, g.Path, g.Port.String(), p.path, metricsPort)
		}
	}
}

// pod is one pod of a workload, with the downward API's values.
type pod struct {
	name string
	spec corev1.PodSpec
	m    *manifests
	// claims are the StatefulSet's volumeClaimTemplates.
	claims []string
}

// checkPod checks what every Neptune pod must have: the release's image,
// each container's command and flags and NEPTUNE_* variables known to
// the binary, no Service links, resources, a config file it mounts.
func checkPod(t *testing.T, what, name string, spec corev1.PodSpec, m *manifests, claims []string) *pod {
	t.Helper()
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks must be false: Service variables (NEPTUNE_*_SERVICE_HOST, ...) share the flags' prefix", what)
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if want := "neptune:" + version.Release; c.Image != want {
			t.Errorf("%s: container %s: image %q, want %q (internal/version.Release)", what, c.Name, c.Image, want)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: container %s: imagePullPolicy %q, want IfNotPresent", what, c.Name, c.ImagePullPolicy)
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: container %s: command %v: the image's entrypoint is the binary; give args", what, c.Name, c.Command)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s: set cpu and memory requests and a memory limit", what, c.Name)
		}
		var path []string
		for _, a := range c.Args {
			if strings.HasPrefix(a, "-") {
				break
			}
			path = append(path, a)
		}
		known := cli.FlagEnvNames(path...)
		if len(path) == 0 || known == nil {
			t.Errorf("%s: container %s: args %v name no neptune command", what, c.Name, c.Args)
			continue
		}
		for _, a := range c.Args[len(path):] {
			if f, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(known, cli.EnvName(f)) {
				t.Errorf("%s: container %s: neptune %s has no flag %s", what, c.Name, strings.Join(path, " "), a)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, cli.EnvPrefix) && !slices.Contains(known, e.Name) {
				t.Errorf("%s: container %s: $%s is no variable of neptune %s (its flags: %v)", what, c.Name, e.Name, strings.Join(path, " "), known)
			}
		}
	}
	return &pod{name: name, spec: spec, m: m, claims: claims}
}

var ref = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) by the value of a variable defined before, as
// the kubelet does; an unknown reference stays as written.
func expand(s string, env map[string]string) string {
	return ref.ReplaceAllStringFunc(s, func(r string) string {
		if v, ok := env[r[2:len(r)-1]]; ok {
			return v
		}
		return r
	})
}

// env is c's environment as the kubelet would set it in this pod, with
// --config's file (NEPTUNE_CONFIG) replaced by a copy of the ConfigMap
// key mounted there; $(VAR) in args is expanded too.
func (p *pod) env(t *testing.T, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			switch f := e.ValueFrom.FieldRef.FieldPath; {
			case f == "metadata.name":
				env[e.Name] = p.name
			case f == "metadata.namespace":
				env[e.Name] = namespace
			case f == "status.podIP":
				env[e.Name] = podIP
			case f == "metadata.labels['topology.kubernetes.io/zone']":
				env[e.Name] = zone
			default:
				t.Fatalf("container %s: $%s: fieldRef %s not simulated here", c.Name, e.Name, f)
			}
		default:
			t.Fatalf("container %s: $%s: only values and fieldRefs are simulated", c.Name, e.Name)
		}
	}
	for i, a := range c.Args {
		c.Args[i] = expand(a, env)
		if strings.Contains(c.Args[i], "$(") {
			t.Errorf("container %s: %q refers to an undefined variable", c.Name, a)
		}
	}
	for k, v := range env {
		if strings.Contains(v, "$(") {
			t.Errorf("container %s: $%s=%q refers to an undefined variable", c.Name, k, v)
		}
	}
	if file, ok := env[cli.EnvName("config")]; ok {
		v, key := p.volumeAt(c, file)
		if v == nil || v.ConfigMap == nil {
			t.Fatalf("container %s: config %s is not in a mounted ConfigMap", c.Name, file)
		}
		cm := p.m.configMap(v.ConfigMap.Name)
		if cm == nil || cm.Data[key] == "" {
			t.Fatalf("container %s: config %s: ConfigMap %s has no key %q", c.Name, file, v.ConfigMap.Name, key)
		}
		copied := filepath.Join(t.TempDir(), key)
		if err := os.WriteFile(copied, []byte(cm.Data[key]), 0o644); err != nil {
			t.Fatal(err)
		}
		env[cli.EnvName("config")] = copied
	}
	return env
}

// volumeAt is the volume mounted in c where path is, and path inside it.
func (p *pod) volumeAt(c *corev1.Container, path string) (*corev1.Volume, string) {
	for _, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") || vm.SubPath != "" {
			continue
		}
		for i := range p.spec.Volumes {
			if p.spec.Volumes[i].Name == vm.Name {
				return &p.spec.Volumes[i], rel
			}
		}
		if slices.Contains(p.claims, vm.Name) {
			return &corev1.Volume{Name: vm.Name}, rel
		}
	}
	return nil, ""
}

// mountedFrom reports whether path in c is on the volume of that kind
// (claim, secret, emptyDir) and name (the claim template's, the Secret's).
func (p *pod) mountedFrom(c *corev1.Container, path, kind, name string) bool {
	v, rel := p.volumeAt(c, path)
	switch {
	case v == nil:
		return false
	case kind == "claim":
		return v.Name == name && slices.Contains(p.claims, name) && v.VolumeSource == (corev1.VolumeSource{})
	case kind == "secret":
		s := p.m.secret(name)
		if v.Secret == nil || v.Secret.SecretName != name || s == nil {
			return false
		}
		_, ok := s.StringData[rel]
		return ok
	case kind == "emptyDir":
		return v.Name == name && v.EmptyDir != nil
	}
	return false
}

// checkCertificate: the init container "cert" issues the certificate
// (flag --node or --gateway, for name) from the CA Secret, mounted
// read-only, into the volume c reads its tls dir from, by the same path.
func (p *pod) checkCertificate(t *testing.T, c *corev1.Container, tlsDir, flag, name string) {
	t.Helper()
	if tlsDir == "" {
		t.Errorf("container %s: no tls dir", c.Name)
		return
	}
	v, _ := p.volumeAt(c, tlsDir)
	if v == nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("container %s: tls dir %s is not an in-memory emptyDir", c.Name, tlsDir)
		return
	}
	init := container(t, p.spec.InitContainers, "cert")
	p.env(t, init) // expands $(POD_NAME) in its args
	args := map[string]string{}
	for i := 0; i+1 < len(init.Args); i++ {
		if strings.HasPrefix(init.Args[i], "--") {
			args[init.Args[i]] = init.Args[i+1]
		}
	}
	if got := strings.Join(init.Args[:3], " "); got != "tls cert create" {
		t.Fatalf("init container cert runs %q, want tls cert create", got)
	}
	if args[flag] != name {
		t.Errorf("init container cert: %s %q, want %q", flag, args[flag], name)
	}
	if !slices.Contains(init.Args, "--force") {
		t.Errorf("init container cert: without --force a pod started again on its emptyDir fails")
	}
	if out, _ := p.volumeAt(init, args["--out"]); out == nil || out.Name != v.Name || filepath.Clean(args["--out"]) != filepath.Clean(tlsDir) {
		t.Errorf("init container cert: --out %q is not where %s reads its tls dir %s (volume %s)", args["--out"], c.Name, tlsDir, v.Name)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if !p.mountedFrom(init, filepath.Join(args["--dir"], f), "secret", "neptune-ca") {
			t.Errorf("init container cert: --dir %s has no %s from the neptune-ca Secret", args["--dir"], f)
		}
	}
	for _, vm := range init.VolumeMounts {
		if v, _ := p.volumeAt(init, vm.MountPath); v != nil && v.Secret != nil && !vm.ReadOnly {
			t.Errorf("init container cert: Secret volume %s not mounted read-only", vm.Name)
		}
	}
	for _, vm := range c.VolumeMounts {
		if v, _ := p.volumeAt(c, vm.MountPath); v != nil && v.Secret != nil && v.Secret.SecretName == "neptune-ca" {
			t.Errorf("container %s mounts the CA key; only the init container may", c.Name)
		}
	}
}
