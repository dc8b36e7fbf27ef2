package main

import (
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// compose builds every resource of the Database (docs/composed.md: What gets
// composed), keyed by its composition resource name. Builders are pure; what exists depends only on
// the spec, the input and the plan.
func compose(db *database, p *plan) map[resource.Name]any {
	settings := instanceSettings(db, p)
	conf := renderConf(db, settings)
	out := map[resource.Name]any{
		rnCredentials:     credentialsSecret(db, p.Passwords),
		rnSuperuser:       superuserSecret(db, p.Passwords),
		rnScripts:         scriptsConfigMap(db, p, conf),
		rnStatefulSet:     statefulSet(db, p, configHash(settings)),
		rnService:         primaryService(db, p.Primary),
		rnServiceHeadless: headlessService(db),
		// Kept with one instance too: deleting it when a Database scales
		// to one would turn its clients' lookups into NXDOMAIN.
		rnServiceRead: readService(db),
	}
	if p.Replicas > 1 {
		out[rnPDB] = podDisruptionBudget(db)
	}
	if db.NetworkPolicy {
		out[rnNetworkPolicy] = networkPolicy(db)
	}
	if a := p.Archive; a != nil {
		if a.Secret != nil {
			out[rnObjectStorage] = a.Secret
		}
		out[rnArchiveCheck] = archiveCheckCronJob(db, p)
		if db.Backup.Enabled {
			out[rnFullBackup] = fullBackupCronJob(db, p)
		}
	}
	if m := db.Metrics; m != nil {
		if m.PodMonitor {
			out[rnPodMonitor] = podMonitor(db)
		}
		if m.Alerts {
			out[rnPrometheusRule] = prometheusRule(db, p)
		}
	}
	if p.Drill != nil {
		out[rnDrill] = drillCronJob(db, p)
	}
	if db.Backup.Enabled {
		out[rnBackup] = backupCronJob(db, p)
	}
	if p.Restore != nil && p.Restore.Job != nil {
		out[rnRestore] = p.Restore.Job
	}
	if p.Failover != nil && p.Failover.Job != nil {
		out[rnFailover] = p.Failover.Job
	}
	return out
}

// setConnectionDetails publishes the app credentials as the XR's connection
// details: a legacy claim's writeConnectionSecretToRef gets them. (v2
// namespaced XRs have no connection details; apps mount N-credentials.)
func setConnectionDetails(rsp *fnv1.RunFunctionResponse, desired map[resource.Name]any) {
	s, ok := desired[rnCredentials].(*corev1.Secret)
	if !ok {
		return
	}
	rsp.Desired.Composite.ConnectionDetails = make(map[string][]byte, len(s.Data))
	for k, v := range s.Data {
		rsp.Desired.Composite.ConnectionDetails[k] = v
	}
}
