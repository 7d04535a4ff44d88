// Command kube-strict decodes Kubernetes manifests (multi-document YAML on standard
// input) strictly into the API's own Go types: a misspelt or misplaced field, or a
// value of the wrong type, is an error, which `helm lint` and `helm template` do not
// catch. scripts/check_helm.py runs it on the chart's renderings. Kinds that are not
// part of Kubernetes itself (ServiceMonitor) are named and skipped.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

func typed(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

// documents splits a YAML stream at its "---" lines.
func documents(in []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimRight(line, " ") == "---" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	return append(docs, cur.Bytes())
}

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-strict:", err)
		os.Exit(2)
	}
	failed, checked := 0, 0
	for _, doc := range documents(in) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			fmt.Fprintln(os.Stderr, "kube-strict: not YAML:", err)
			failed++
			continue
		}
		if head.Kind == "" {
			continue // only comments
		}
		name := fmt.Sprintf("%s %s/%s", head.APIVersion, head.Kind, head.Metadata.Name)
		if head.APIVersion == "monitoring.coreos.com/v1" {
			fmt.Println("kube-strict: skipped (not a Kubernetes kind):", name)
			continue
		}
		obj := typed(head.APIVersion, head.Kind)
		if obj == nil {
			fmt.Fprintln(os.Stderr, "kube-strict: unexpected kind:", name)
			failed++
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fmt.Fprintf(os.Stderr, "kube-strict: %s: %v\n", name, err)
			failed++
			continue
		}
		checked++
	}
	if failed > 0 || checked == 0 {
		fmt.Fprintf(os.Stderr, "kube-strict: %d object(s) failed, %d decoded\n", failed, checked)
		os.Exit(1)
	}
	fmt.Printf("kube-strict: %d object(s) decoded strictly\n", checked)
}
