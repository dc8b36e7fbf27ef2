package main

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/scripts"
)

// The size of the pods' shared memory volume, and the mode of the mounted
// Secrets (names.go holds the volumes' names and paths).
const (
	shmSize     = "256Mi"
	secretsMode = 0o440
)

func image(db *database) string { return imageFor(db.Image, db.Images, db.Version) }

// statefulSet composes the PostgreSQL instances: the ordinal the scripts
// ConfigMap names (0 until a failover) is the primary, every other ordinal a
// streaming hot standby cloned from it.
func statefulSet(db *database, p *plan, configHash string) *appsv1.StatefulSet {
	retain := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	whenDeleted := retain
	if db.DeletionPolicy == deletionDelete {
		whenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        db.Name,
			Namespace:   db.Namespace,
			Labels:      labels(db, componentDatabase),
			Annotations: map[string]string{annotationMajor: strconv.Itoa(p.Major)},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(p.Replicas),
			ServiceName: headlessServiceName(db),
			Selector:    &metav1.LabelSelector{MatchLabels: selectorLabels(db)},
			// Parallel: every pod starts at once. With OrderedReady, after a
			// failover moved the primary above ordinal 0, a full restart
			// (every pod at once: a node reboot, a cluster restore) waited
			// for ordinal 0, a standby, to be ready before creating the
			// primary's pod, and a standby is ready only once it streams
			// from the primary: never. Standbys wait for their primary
			// themselves (entrypoint.sh retries the clone and the stream).
			// The policy is immutable: a StatefulSet created as OrderedReady
			// keeps it (plan.go).
			PodManagementPolicy: p.PodManagement,
			// The function rolls a new template itself, one decision per
			// reconcile (roll.go): the partition is its lever.
			UpdateStrategy: p.Roll.strategy(p.Replicas),
			// Scaling in never deletes a standby's volume: scaling back out
			// reuses it. Deleting the Database follows deletionPolicy.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: whenDeleted,
				WhenScaled:  retain,
			},
			VolumeClaimTemplates: p.Templates,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels(db, componentDatabase),
					Annotations: map[string]string{annotationConfigHash: configHash},
				},
				Spec: podSpecDefaults(corev1.PodSpec{
					// The pause container, not the postmaster, is PID 1 and
					// reaps orphans. A probe the kubelet kills on timeout
					// leaves its psql behind; reparented to a postmaster
					// running as PID 1, its exit (SIGPIPE) read as a crashed
					// backend and restarted the whole server (seen on the
					// real node under load, on primaries and standbys).
					ShareProcessNamespace: ptr.To(true),
					// PostgreSQL's fast shutdown needs time to checkpoint.
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Affinity:                      spreadInstances(db, p.SpreadRequired),
					TopologySpreadConstraints:     spreadZones(db),
					Containers:                    instanceContainers(db, p),
					Volumes:                       instanceVolumes(db),
				}),
			},
		},
	}
}

// volumeClaimTemplate is a ReadWriteOnce volume per instance. An empty class
// means the cluster's default storage class.
func volumeClaimTemplate(name string, size resource.Quantity, class string) corev1.PersistentVolumeClaim {
	t := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if class != "" {
		t.Spec.StorageClassName = ptr.To(class)
	}
	return t
}

// spreadInstances keeps one instance per node: a standby on the primary's
// node does not survive that node. Required (plan.SpreadRequired): an
// instance no node can take stays Pending, and the Scheduled condition says
// so; preferred: a cluster with fewer nodes than instances still runs them
// all, sharing nodes. The term selects the instance pods only (with their
// component): the scheduler also keeps a new pod off every node whose pods'
// required anti-affinity selects it, and the backup, restore and failover
// Jobs' pods carry the name and instance labels too. Selected by those two
// alone, the volume dump (which must run beside ordinal 0) could run
// nowhere and the failover Job only on a node without an instance (seen on
// several real nodes: e2e TestNodes).
func spreadInstances(db *database, required bool) *corev1.Affinity {
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: instanceLabels(db)},
		TopologyKey:   corev1.LabelHostname,
	}
	if required {
		return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term},
		}}
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}},
	}}
}

// spreadZones spreads the instances over zones as evenly as the scheduler
// can, never more: a zone's loss then takes as few instances as the cluster
// allows. ScheduleAnyway, because a cluster may have one zone, or nodes
// without the label; the volumes' own zones constrain a pod anyway.
func spreadZones(db *database) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelTopologyZone,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: instanceLabels(db)},
	}}
}

// instanceEnv is the environment the scripts run in the instances share:
// entrypoint.sh, probe.sh and prestop.sh in the postgres container
// (postgresEnv), sync-passwords.sh in the sidecar (passwordSyncEnv)
// (scripts.Contract; TestContractEnv holds each container to it).
func instanceEnv(db *database) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: scripts.EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: scripts.EnvPGData, Value: pgData},
		{Name: scripts.EnvPGPort, Value: strconv.Itoa(postgresPort)},
		{Name: scripts.EnvPGHost, Value: socketDir},
		{Name: scripts.EnvAppUser, Value: db.SQLName},
		// Standbys clone and stream from the rw Service: it follows a
		// failover, so a standby needs no restart to follow the new primary.
		{Name: scripts.EnvPrimaryHost, Value: serviceHost(db, db.Name)},
		{Name: scripts.EnvPeerDomain, Value: peerDomain(db)},
		{Name: scripts.EnvScriptsDir, Value: scriptsDir},
		{Name: scripts.EnvAdminSecretDir, Value: adminDir},
	}
	if db.ObjectStorage != nil {
		// pgbackrest.sh (postgres's archive_command, the sidecar's stanza)
		// reads the bucket's keys there.
		env = append(env, corev1.EnvVar{Name: scripts.EnvObjectStorageDir, Value: objectStorageDir})
	}
	if db.Metrics != nil {
		// The exporter's role: the sidecar creates it, the entrypoint
		// admits it on the socket.
		env = append(env, corev1.EnvVar{Name: scripts.EnvMonitorUser, Value: monitorUser})
	}
	return env
}

// postgresEnv is instanceEnv, the database the bootstrap creates and, with
// metrics, the uid the entrypoint maps to the exporter's role.
func postgresEnv(db *database) []corev1.EnvVar {
	env := append(instanceEnv(db), corev1.EnvVar{Name: scripts.EnvDBName, Value: db.SQLName})
	if db.Metrics != nil {
		env = append(env, corev1.EnvVar{Name: scripts.EnvMonitorUID, Value: strconv.Itoa(monitorUID)})
	}
	return env
}

// passwordSyncEnv is instanceEnv, the credentials Secret's mount (the
// sidecar applies an edited app password once the superuser Secret's copy
// and verifier follow it) and the round's interval.
func passwordSyncEnv(db *database) []corev1.EnvVar {
	return append(instanceEnv(db),
		corev1.EnvVar{Name: scripts.EnvAppSecretDir, Value: appDir},
		corev1.EnvVar{Name: scripts.EnvSyncInterval, Value: "5"})
}

// instanceMounts are the mounts the postgres container and the sidecar
// share. The credentials Secret is the sidecar's alone: the postgres
// container sets the roles' passwords from the verifiers in the superuser
// Secret.
func instanceMounts(db *database) []corev1.VolumeMount {
	m := []corev1.VolumeMount{
		{Name: volData, MountPath: dataDir},
		{Name: volScripts, MountPath: scriptsDir, ReadOnly: true},
		{Name: volAdmin, MountPath: adminDir, ReadOnly: true},
		{Name: volRun, MountPath: socketDir},
		{Name: volTmp, MountPath: tmpDir},
		{Name: volShm, MountPath: shmDir},
	}
	if db.ObjectStorage != nil {
		m = append(m, corev1.VolumeMount{Name: volObjectStorage, MountPath: objectStorageDir, ReadOnly: true})
	}
	return m
}

// instanceContainers are PostgreSQL, the password sync and, when the input
// asks for metrics, the exporter.
func instanceContainers(db *database, p *plan) []corev1.Container {
	c := []corev1.Container{postgresContainer(db, p), passwordSyncContainer(db, p)}
	if db.Metrics != nil {
		c = append(c, metricsContainer(db))
	}
	return c
}

func postgresContainer(db *database, p *plan) corev1.Container {
	res := corev1.ResourceList{corev1.ResourceCPU: db.Tier.CPU, corev1.ResourceMemory: db.Tier.Memory}
	return corev1.Container{
		Name:            containerPostgres,
		Image:           p.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"bash", scriptsDir + "/" + scripts.Entrypoint},
		Env:             postgresEnv(db),
		Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: postgresPort, Protocol: corev1.ProtocolTCP}},
		Resources:       corev1.ResourceRequirements{Requests: res, Limits: res},
		VolumeMounts:    instanceMounts(db),
		// Readiness detects a lost primary: 2 failures 5 s apart start the
		// failover's grace. A primary's probe also asks its peers (the
		// fence, probe.sh), hence the longer timeout.
		ReadinessProbe: probe("ready", 5, 2, 10),
		// The liveness probe is the kubelet's watchdog over a hung
		// postgres, and part of the failover fence: a postmaster that
		// answers no connection for livenessPeriod*livenessFailures
		// seconds is killed (SIGTERM, SIGKILL livenessKillGrace seconds
		// later, however long the pod's own grace), so a frozen primary
		// that resumes has no session left to acknowledge a write on. The
		// failover Job waits that bound out before promoting (fenceSeconds).
		// A standby cloning or a pod holding is alive (probe.sh live says
		// so); a slow checkpoint or crash recovery still answers
		// (rejecting), which is alive too.
		LivenessProbe: livenessProbe(),
		// A primary whose pod is deleted (a drain, a node's graceful
		// shutdown) serves on until the switchover the function starts
		// for it has moved the primary (prestop.sh): a write gap of
		// seconds instead of a failover's grace and fence.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"bash", scriptsDir + "/" + scripts.PreStop}},
		}},
		SecurityContext: containerSecurityContext(),
	}
}

// The liveness probe's timings (see postgresContainer), read back by
// fenceSeconds.
const (
	livenessPeriod    = 4
	livenessFailures  = 3
	livenessTimeout   = 4
	livenessKillGrace = 2
)

func livenessProbe() *corev1.Probe {
	p := probe("live", livenessPeriod, livenessFailures, livenessTimeout)
	p.TerminationGracePeriodSeconds = ptr.To[int64](livenessKillGrace)
	return p
}

func probe(mode string, period, failures, timeout int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"bash", scriptsDir + "/" + scripts.Probe, mode}}},
		PeriodSeconds:    period,
		TimeoutSeconds:   timeout,
		FailureThreshold: failures,
	}
}

// passwordSyncContainer applies the passwords of the mounted Secrets to the
// running primary whenever they change: the Secrets are the source of truth,
// so a Secret deleted by accident and regenerated never locks apps out.
func passwordSyncContainer(db *database, p *plan) corev1.Container {
	return corev1.Container{
		Name:            containerPasswordSync,
		Image:           p.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"bash", scriptsDir + "/" + scripts.SyncPasswords},
		Env:             passwordSyncEnv(db),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		// The data volume too: the script tells a standby by its standby.signal.
		VolumeMounts:    append(instanceMounts(db), corev1.VolumeMount{Name: volApp, MountPath: appDir, ReadOnly: true}),
		SecurityContext: containerSecurityContext(),
	}
}

// instanceVolumes are the pod volumes beside the claim templates.
func instanceVolumes(db *database) []corev1.Volume {
	v := []corev1.Volume{
		scriptsVolume(db),
		secretVolume(volApp, credentialsName(db)),
		secretVolume(volAdmin, superuserName(db)),
		{Name: volRun, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// The container runtime's 64Mi /dev/shm is too small for parallel
		// queries' dynamic shared memory.
		{Name: volShm, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse(shmSize)),
		}}},
	}
	if db.ObjectStorage != nil {
		v = append(v, objectStorageVolume(db))
	}
	return v
}

func scriptsVolume(db *database) corev1.Volume {
	return corev1.Volume{Name: volScripts, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: scriptsName(db)},
	}}}
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  secret,
		DefaultMode: ptr.To[int32](secretsMode),
	}}}
}
