package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/example/function-database/input/v1beta1"
)

const (
	defaultFailoverGrace = 10
	maxFailoverGrace     = 3600
)

// config is the function input resolved: tiers parsed, defaults applied.
type config struct {
	Tiers map[string]tier
	Image string
	// Images are the input's whole image references by version key ("15",
	// "15.8"), validated.
	Images            map[string]string
	StorageClassName  string
	ClusterDomain     string
	NetworkPolicy     bool
	AllowedNamespaces []string
	// Failover and FailoverGrace are the input's failover settings.
	Failover      bool
	FailoverGrace int32
	// SpreadNodes is the input's spread.nodes: spreadRequired,
	// spreadPreferred, or "" (unset: plan.go decides).
	SpreadNodes string
	// ObjectStorage is the input's objectStorage resolved; nil archives
	// nothing (archive.go).
	ObjectStorage *objectStorage
	// DeferUpdates is the input's updates.policy Deferred (roll.go).
	DeferUpdates bool
	// Metrics is the input's metrics resolved; nil adds no exporter
	// (metrics.go).
	Metrics *metricsConfig
}

// The values of the input's updates.policy.
const (
	updatesSupervised = "Supervised"
	updatesDeferred   = "Deferred"
)

// The values of the input's spread.nodes.
const (
	spreadRequired  = "Required"
	spreadPreferred = "Preferred"
)

// configCache holds resolved inputs by their deterministic encoding: a
// Composition's input is the same on every call, and resolving it (tiers,
// quantities) is a fifth of a small request. Bounded, so that it cannot grow
// with the number of requests.
type configCache struct {
	mu sync.Mutex
	m  map[string]*config
}

const maxCachedConfigs = 64

func (c *configCache) get(s *structpb.Struct) (*config, field.ErrorList) {
	key, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return parseInput(s)
	}
	c.mu.Lock()
	cfg, ok := c.m[string(key)]
	c.mu.Unlock()
	if ok {
		return cfg, nil
	}
	cfg, errs := parseInput(s)
	if len(errs) > 0 {
		return cfg, errs
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]*config, maxCachedConfigs)
	}
	if len(c.m) < maxCachedConfigs {
		c.m[string(key)] = cfg
	}
	c.mu.Unlock()
	return cfg, nil
}

// parseInput decodes the Composition step's input strictly (an unknown field
// is a typo the platform team wants to hear about) and resolves it. No input
// means the built-in defaults.
func parseInput(s *structpb.Struct) (*config, field.ErrorList) {
	in := &v1beta1.Input{}
	p := field.NewPath("input")
	if s != nil && len(s.GetFields()) > 0 {
		b, err := protojson.Marshal(s)
		if err != nil {
			return nil, field.ErrorList{field.InternalError(p, err)}
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(in); err != nil {
			return nil, field.ErrorList{field.Invalid(p, "", "cannot decode the function input (apiVersion "+inputAPIVersion+", kind "+inputKind+"): "+err.Error())}
		}
		if in.APIVersion != inputAPIVersion || in.Kind != inputKind {
			return nil, field.ErrorList{field.Invalid(p.Child("apiVersion"), in.APIVersion+", Kind="+in.Kind, "the input must be apiVersion "+inputAPIVersion+", kind "+inputKind)}
		}
	}
	tiers, errs := resolveTiers(in)
	cfg := &config{
		Tiers:            tiers,
		Image:            or(in.Image, defaultImage),
		StorageClassName: in.StorageClassName,
		ClusterDomain:    or(in.ClusterDomain, defaultClusterDomain),
		NetworkPolicy:    true,
		Failover:         true,
		FailoverGrace:    defaultFailoverGrace,
	}
	if f := in.Failover; f != nil {
		if f.Enabled != nil {
			cfg.Failover = *f.Enabled
		}
		if g := f.GraceSeconds; g != nil {
			if *g < 0 || *g > maxFailoverGrace {
				errs = append(errs, field.Invalid(p.Child("failover", "graceSeconds"), *g, fmt.Sprintf("must be between 0 and %d seconds", maxFailoverGrace)))
			}
			cfg.FailoverGrace = *g
		}
	}
	if sp := in.Spread; sp != nil {
		switch sp.Nodes {
		case "", spreadRequired, spreadPreferred:
			cfg.SpreadNodes = sp.Nodes
		default:
			errs = append(errs, field.NotSupported(p.Child("spread", "nodes"), sp.Nodes, []string{spreadRequired, spreadPreferred}))
		}
	}
	if u := in.Updates; u != nil {
		switch u.Policy {
		case "", updatesSupervised, updatesDeferred:
			cfg.DeferUpdates = u.Policy == updatesDeferred
		default:
			errs = append(errs, field.NotSupported(p.Child("updates", "policy"), u.Policy, []string{updatesSupervised, updatesDeferred}))
		}
	}
	if in.Metrics != nil {
		m, e := resolveMetrics(p.Child("metrics"), in.Metrics)
		errs = append(errs, e...)
		cfg.Metrics = m
	}
	if in.ObjectStorage != nil {
		os, e := resolveObjectStorage(p.Child("objectStorage"), in.ObjectStorage)
		errs = append(errs, e...)
		cfg.ObjectStorage = os
	}
	errs = append(errs, validateRepository(p.Child("image"), cfg.Image)...)
	images, e := resolveImages(p.Child("images"), in.Images)
	errs = append(errs, e...)
	cfg.Images = images
	if cfg.ObjectStorage != nil && cfg.Image == defaultImage && len(cfg.Images) == 0 {
		// Every pod would hold (entrypoint.sh): say it here, once.
		errs = append(errs, field.Invalid(p.Child("image"), cfg.Image, "the official postgres image has no pgBackRest, which objectStorage archives with: name an image that has it (images/postgres-pgbackrest, docs/backups.md)"))
	}
	if cfg.StorageClassName != "" {
		for _, m := range validation.IsDNS1123Subdomain(cfg.StorageClassName) {
			errs = append(errs, field.Invalid(p.Child("storageClassName"), cfg.StorageClassName, m))
		}
	}
	for _, m := range validation.IsDNS1123Subdomain(cfg.ClusterDomain) {
		errs = append(errs, field.Invalid(p.Child("clusterDomain"), cfg.ClusterDomain, m))
	}
	if np := in.NetworkPolicy; np != nil {
		if np.Enabled != nil {
			cfg.NetworkPolicy = *np.Enabled
		}
		for i, ns := range np.AllowedNamespaces {
			for _, m := range validation.IsDNS1123Label(ns) {
				errs = append(errs, field.Invalid(p.Child("networkPolicy", "allowedNamespaces").Index(i), ns, m))
			}
		}
		cfg.AllowedNamespaces = slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(np.AllowedNamespaces)))))
	}
	return cfg, errs
}
