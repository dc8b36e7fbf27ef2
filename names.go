package main

import (
	"strconv"

	"github.com/crossplane/function-sdk-go/resource"
)

// Composition resource names: the keys of the desired composed resources,
// stable across versions because Crossplane matches observed to desired by
// them. Renaming one makes Crossplane delete and re-create that resource.
const (
	rnCredentials     resource.Name = "credentials"
	rnSuperuser       resource.Name = "superuser"
	rnScripts         resource.Name = "scripts"
	rnStatefulSet     resource.Name = "statefulset"
	rnService         resource.Name = "service"
	rnServiceRead     resource.Name = "service-read"
	rnServiceHeadless resource.Name = "service-headless"
	rnPDB             resource.Name = "pdb"
	rnNetworkPolicy   resource.Name = "networkpolicy"
	rnBackup          resource.Name = "backup"
	rnRestore         resource.Name = "restore"
)

// Kubernetes names, all derived from N so that the pieces can name each
// other without lookups: the StatefulSet's serviceName is N-hl, standbys
// clone from N-0.N-hl, the backup Job mounts the PVC backups-N-0.
func credentialsName(db *database) string     { return db.Name + "-credentials" }
func superuserName(db *database) string       { return db.Name + "-superuser" }
func scriptsName(db *database) string         { return db.Name + "-scripts" }
func readServiceName(db *database) string     { return db.Name + "-r" }
func headlessServiceName(db *database) string { return db.Name + "-hl" }
func backupName(db *database) string          { return db.Name + "-backup" }
func restoreName(db *database) string         { return db.Name + "-restore" }
func podName(db *database, ordinal int) string {
	return db.Name + "-" + strconv.Itoa(ordinal)
}

// backupsClaimName is the PVC the StatefulSet controller creates for the
// backups volume claim template of ordinal 0, for database N.
func backupsClaimName(n string) string { return volBackups + "-" + n + "-0" }

// serviceHost is the cluster DNS name of a Service of the Database.
func serviceHost(db *database, service string) string {
	return service + "." + db.Namespace + ".svc." + db.ClusterDomain
}

// primaryHost is the stable DNS name of ordinal 0 through the headless Service.
func primaryHost(db *database) string {
	return podName(db, 0) + "." + headlessServiceName(db) + "." + db.Namespace + ".svc." + db.ClusterDomain
}
