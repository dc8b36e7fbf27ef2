package main

import (
	"strconv"
	"strings"

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
	rnFailover        resource.Name = "failover"
)

// Suffixes of the composed names. A Database whose own name ended in one of
// them would compose a name another Database composes (Databases orders and
// orders-r would both own Service orders-r), so names ending in any of them
// are refused, here (reservedSuffix) and at admission by the XRDs' CEL rule
// (TestReservedSuffixes keeps the three lists equal).
const (
	suffixCredentials = "-credentials"
	suffixSuperuser   = "-superuser"
	suffixScripts     = "-scripts"
	suffixRead        = "-r"
	suffixHeadless    = "-hl"
	suffixBackup      = "-backup"
	suffixRestore     = "-restore"
)

// reservedSuffixes are every suffix above. Only -r and -hl collide today
// (Services); the others are of kinds no other Database composes under that
// name, but reserving every one keeps the rule simple and keeps holding when
// a composed kind changes.
var reservedSuffixes = []string{suffixCredentials, suffixSuperuser, suffixScripts, suffixRead, suffixHeadless, suffixBackup, suffixRestore}

// Kubernetes names, all derived from N so that the pieces can name each
// other without lookups: the StatefulSet's serviceName is N-hl, standbys
// clone from N-0.N-hl, the backup Job mounts the PVC backups-N-0.
func credentialsName(db *database) string     { return db.Name + suffixCredentials }
func superuserName(db *database) string       { return db.Name + suffixSuperuser }
func scriptsName(db *database) string         { return db.Name + suffixScripts }
func readServiceName(db *database) string     { return db.Name + suffixRead }
func headlessServiceName(db *database) string { return db.Name + suffixHeadless }
func backupName(db *database) string          { return db.Name + suffixBackup }
func restoreName(db *database) string         { return db.Name + suffixRestore }
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

// peerDomain is the headless Service's domain: instance k is N-k.peerDomain.
func peerDomain(db *database) string {
	return headlessServiceName(db) + "." + db.Namespace + ".svc." + db.ClusterDomain
}

// reservedSuffix returns the reserved suffix name ends in, or "".
func reservedSuffix(name string) string {
	for _, s := range reservedSuffixes {
		if strings.HasSuffix(name, s) {
			return s
		}
	}
	return ""
}
