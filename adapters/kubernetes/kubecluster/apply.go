package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// Apply creates every object of a YAML stream as the cluster's administrator, as `kubectl
// create -f` does, with strict field validation: a field the API does not know is refused,
// not dropped. A kind the API server does not serve yet (a CustomResourceDefinition created
// just before) is retried until ctx ends.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("a dynamic client: %w", err)
	}
	disc := memory.NewMemCacheClient(c.Client.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(disc)
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decoding a manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := c.create(ctx, dyn, disc, mapper, obj); err != nil {
			return fmt.Errorf("%s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

func (c *Cluster) create(ctx context.Context, dyn dynamic.Interface, disc interface{ Invalidate() },
	mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	for {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			ri := dyn.Resource(m.Resource)
			var r dynamic.ResourceInterface = ri
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				r = ri.Namespace(obj.GetNamespace())
			}
			_, err = r.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			if err == nil || !apierrors.IsNotFound(err) || obj.GetNamespace() == "" && m.Scope.Name() == meta.RESTScopeNameNamespace {
				return err
			}
		} else if !meta.IsNoMatchError(err) {
			return err
		}
		// Not served yet: a kind whose definition is still being established.
		disc.Invalidate()
		mapper.Reset()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
