package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// postgresUID is the postgres user of the official image (Debian based).
// Running as it, not root, keeps every pod within the restricted Pod
// Security Standard.
const postgresUID = 999

// monitorUID is the uid the exporter runs as: nobody in Debian, so the
// official image names it (peer authentication needs a name); any uid but
// postgres's would do, as long as the image has a name for it.
const monitorUID = 65534

// podSecurityContext is the one pod security context of every pod the
// function composes: non-root, the runtime's default seccomp profile, and an
// fsGroup so the postgres user owns the volumes.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To[int64](postgresUID),
		RunAsGroup:          ptr.To[int64](postgresUID),
		FSGroup:             ptr.To[int64](postgresUID),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext is the one container security context: no
// privilege escalation, no capabilities, a read-only root filesystem
// (PostgreSQL writes only to its volumes, /tmp and its socket directory).
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// monitorSecurityContext is the exporter's: the restricted one, as
// monitorUID (the pod's fsGroup still lets it reach the socket).
func monitorSecurityContext() *corev1.SecurityContext {
	c := containerSecurityContext()
	c.RunAsUser = ptr.To[int64](monitorUID)
	c.RunAsGroup = ptr.To[int64](monitorUID)
	return c
}

// podSpecDefaults are set on every pod: no service account token (the pods
// never call the Kubernetes API) and no service links (env pollution, and a
// Service named like a PostgreSQL variable would change its behaviour).
func podSpecDefaults(spec corev1.PodSpec) corev1.PodSpec {
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.EnableServiceLinks = ptr.To(false)
	spec.SecurityContext = podSecurityContext()
	return spec
}
