package main

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Reasons of blocked changes: spec changes the function refuses to apply
// because applying them would lose data or be rejected by the API server.
const (
	reasonMajorVersionChange = "MajorVersionChangeRefused"
	reasonStorageShrink      = "StorageShrinkRefused"
	reasonStorageGrow        = "StorageResizeUnsupported"
	reasonStorageClass       = "StorageClassImmutable"
	reasonBackupStorage      = "BackupStorageImmutable"
	reasonRestoreAfterCreate = "RestoreOnlyAtCreation"
)

// blocked is a spec change the function did not apply, and why.
type blocked struct {
	Reason, Message string
}

// plan is what the function decides from the spec and the observed state:
// the safety rules (data is never lost; docs/maintainers.md lists where
// each lives) applied before any builder runs.
type plan struct {
	// Replicas is how many instances are composed: the tier's, or more
	// while the primary sits above it after a failover (scaling in would
	// delete it). The parsed spec (db.Tier) is never rewritten.
	Replicas int32
	// Image is the PostgreSQL image the StatefulSet runs: spec.version, or
	// the running one when a major change was refused.
	Image string
	Major int
	// Templates are the StatefulSet's volume claim templates: from the spec
	// at creation, then exactly the observed ones (the API server rejects a
	// change, and a shrink would lose data).
	Templates []corev1.PersistentVolumeClaim
	// PodManagement is the StatefulSet's pod management policy: Parallel at
	// creation, then exactly the observed one (the API server rejects a
	// change): see statefulset.go.
	PodManagement appsv1.PodManagementPolicyType
	// SpreadRequired: no two instances on one node (spreadInstances). The
	// input's spread.nodes; unset, true at creation, then what the observed
	// pod template has.
	SpreadRequired bool
	// Initialized is true once the StatefulSet has been ready: the database
	// exists and its data must never be replaced by an empty initdb.
	Initialized bool
	// Restore is what happens about spec.restoreFrom (restore.go); nil
	// without it, or when it was set after creation.
	Restore *restorePlan
	// Primary is the ordinal of the primary (failover.go), Failover what
	// happens about failover.
	Primary   int
	Failover  *failoverPlan
	Passwords passwords
	Blocked   []blocked
	// Archive is what happens about the WAL archive (archive.go); nil when
	// the input names no bucket.
	Archive *archivePlan
	// Drill is what happens about the restore drill (drill.go); nil when
	// there is no archive or the drill is off.
	Drill *drillPlan
	// Roll is what happens about a new pod template (roll.go): the
	// StatefulSet's partition and the Updated condition.
	Roll *rollPlan
}

func makePlan(db *database, o *observed, generate func() string) *plan {
	p := &plan{Image: image(db), Major: db.Version.Major, Passwords: resolvePasswords(o, generate)}
	p.Initialized = initialized(o)
	sts := o.StatefulSet
	p.PodManagement = appsv1.ParallelPodManagement
	if sts != nil && sts.Spec.PodManagementPolicy != "" {
		p.PodManagement = sts.Spec.PodManagementPolicy
	}
	p.SpreadRequired = spreadRequiredOf(db, sts)
	primary, invalid := observedPrimary(db, o)
	p.Primary = primary
	p.Replicas = db.Tier.Replicas
	if p.Primary >= int(db.Tier.Replicas) {
		// Scaling in removes the highest ordinals: never the primary's.
		p.Blocked = append(p.Blocked, blocked{reasonScaleInBlocked, fmt.Sprintf(
			"size %s has %d instance(s), but the primary is %s (after a failover): scaling in would delete it; keeping %d instances. Move the primary to a lower ordinal first (docs/failover.md)",
			db.Size, db.Tier.Replicas, podName(db, p.Primary), p.Primary+1)})
		p.Replicas = int32(p.Primary + 1)
	}
	if n, b := failoverHoldsScaleIn(db, o, p.Replicas); b != nil {
		p.Blocked = append(p.Blocked, *b)
		p.Replicas = n
	}

	if sts != nil {
		if running, img, ok := runningMajor(sts); ok && running != db.Version.Major {
			verb := "upgrade"
			if db.Version.Major < running {
				verb = "downgrade"
			}
			p.Image, p.Major = img, running
			p.Blocked = append(p.Blocked, blocked{reasonMajorVersionChange, fmt.Sprintf(
				"spec.version %s would %s PostgreSQL %d in place, which its data directory cannot follow; still running %s. To change major, create a new Database with spec.restoreFrom naming this one",
				db.Version.Tag, verb, running, img)})
		}
	}

	p.Templates = []corev1.PersistentVolumeClaim{
		volumeClaimTemplate(volData, db.Storage, db.StorageClassName),
		volumeClaimTemplate(volBackups, db.Backup.Storage, db.StorageClassName),
	}
	if sts != nil && len(sts.Spec.VolumeClaimTemplates) > 0 {
		p.Templates = p.keepTemplates(db, sts.Spec.VolumeClaimTemplates)
	}

	var b []blocked
	p.Restore, b = planRestore(db, p, o)
	p.Blocked = append(p.Blocked, b...)
	p.Archive = planArchive(db, o)
	p.Drill = planDrill(db, o)
	p.Roll = readRoll(db, p, o)
	p.Failover = planFailover(db, p, o)
	p.Primary = p.Failover.Primary
	p.Roll.decide(db, p, o)
	if invalid != nil {
		p.Failover.Warnings = append([]warning{*invalid}, p.Failover.Warnings...)
		p.Failover.Condition.Message += "; " + invalid.Message
	}
	return p
}

// keepTemplates rebuilds the observed volume claim templates with their
// observed sizes and classes, and reports the spec changes they block.
// Rebuilding (instead of copying) keeps server-filled defaults out of the
// desired state. Only what spec sets explicitly is reported: a size or class
// left to the tier or the input was theirs at creation, and a later tier
// change (medium to large) or input edit adopts the volumes that exist
// instead of reporting a refusal about fields the user never set.
func (p *plan) keepTemplates(db *database, obs []corev1.PersistentVolumeClaim) []corev1.PersistentVolumeClaim {
	out := make([]corev1.PersistentVolumeClaim, 0, len(obs))
	for _, t := range obs {
		size := t.Spec.Resources.Requests[corev1.ResourceStorage]
		class := ""
		if t.Spec.StorageClassName != nil {
			class = *t.Spec.StorageClassName
		}
		out = append(out, volumeClaimTemplate(t.Name, size, class))
		switch t.Name {
		case volData:
			if db.Explicit.Size {
				switch c := db.Storage.Cmp(size); {
				case c < 0:
					p.Blocked = append(p.Blocked, blocked{reasonStorageShrink, fmt.Sprintf(
						"spec.storage.size %s is smaller than the data volumes' %s; volumes never shrink (data would be lost), keeping %s", db.Storage.String(), size.String(), size.String())})
				case c > 0:
					p.Blocked = append(p.Blocked, blocked{reasonStorageGrow, fmt.Sprintf(
						"spec.storage.size %s is larger than the data volumes' %s; growing volumes is not supported yet, keeping %s", db.Storage.String(), size.String(), size.String())})
				}
			}
			if db.Explicit.Class && class != db.StorageClassName {
				p.Blocked = append(p.Blocked, blocked{reasonStorageClass, fmt.Sprintf(
					"spec.storage.storageClassName %q differs from the data volumes' %q, which is fixed at creation; keeping %q", db.StorageClassName, class, class)})
			}
		case volBackups:
			if db.Explicit.BackupSize && db.Backup.Storage.Cmp(size) != 0 {
				p.Blocked = append(p.Blocked, blocked{reasonBackupStorage, fmt.Sprintf(
					"spec.backup.storage %s differs from the backup volume's %s, which is fixed at creation; keeping %s", db.Backup.Storage.String(), size.String(), size.String())})
			}
		}
	}
	return out
}

// runningMajor reads the PostgreSQL major the observed StatefulSet runs, and
// its image reference.
func runningMajor(sts *appsv1.StatefulSet) (int, string, bool) {
	img := ""
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == containerPostgres {
			img = c.Image
		}
	}
	if img == "" {
		return 0, "", false
	}
	if m, err := strconv.Atoi(sts.Annotations[annotationMajor]); err == nil {
		return m, img, true
	}
	// Without the annotation, fall back to the image tag's major.
	_, major := imageVersion(img)
	if m, err := strconv.Atoi(major); err == nil {
		return m, img, true
	}
	return 0, "", false
}

// initialized is sticky: once recorded in the scripts ConfigMap it stays, and
// it is first recorded when the StatefulSet has had a ready instance. A
// ready instance means a primary has run initdb and bootstrap: a standby is
// ready only once it cloned one and streams from it.
func initialized(o *observed) bool {
	if o.Scripts != nil && o.Scripts.Data[keyInitialized] == "true" {
		return true
	}
	return o.StatefulSet != nil && o.StatefulSet.Status.ReadyReplicas > 0
}

// spreadRequiredOf decides whether instances must each have a node of their
// own. The input decides when it says; otherwise a new Database requires
// it, and one that exists keeps what its pod template has: a Database
// created before (instances spread only by preference, perhaps sharing a
// node and that node's local volumes) would otherwise roll into pods that no
// node can take.
func spreadRequiredOf(db *database, sts *appsv1.StatefulSet) bool {
	switch {
	case db.SpreadNodes != "":
		return db.SpreadNodes == spreadRequired
	case sts == nil:
		return true
	}
	a := sts.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == corev1.LabelHostname {
			return true
		}
	}
	return false
}
