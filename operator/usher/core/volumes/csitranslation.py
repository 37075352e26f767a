"""In-tree volume plugins and the CSI drivers that replaced them, as k8s.io/csi-translation-lib v0.37 sees
them: which in-tree plugin a pod's inline volume or a PersistentVolume uses, and the CSI driver and volume
handle it translates to. Pure.

Only what kube-scheduler reads of the library: the plugin and driver names, ``CanSupport`` /
``CanSupportInline`` (which volume source field is set), ``IsMigratableIntreePluginByName``,
``GetCSINameFromInTreeName``, and the ``volumeHandle`` of ``TranslateInTreePVToCSI`` /
``TranslateInTreeInlineVolumeToCSI`` (with their errors). The rest of a translated PV (topology,
access modes, attributes) is not built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
MULTI_ZONE_DELIMITER = "__"
"""cloud-provider's LabelMultiZoneDelimiter: a PV label value naming several zones."""

AWS_EBS_PLUGIN = "kubernetes.io/aws-ebs"
GCE_PD_PLUGIN = "kubernetes.io/gce-pd"
CINDER_PLUGIN = "kubernetes.io/cinder"
AZURE_DISK_PLUGIN = "kubernetes.io/azure-disk"
AZURE_FILE_PLUGIN = "kubernetes.io/azure-file"
VSPHERE_PLUGIN = "kubernetes.io/vsphere-volume"
PORTWORX_PLUGIN = "kubernetes.io/portworx-volume"

_UNSPECIFIED = "UNSPECIFIED"
_AWS_VOLUME = re.compile(r"^vol-[^/]*$")
_AZURE_SECRET_NAME = re.compile(r"azure-storage-account-(.+)-secret")
_AZURE_FILE_RESOURCE_GROUP = "kubernetes.io/azure-file-resource-group"


class TranslationError(ValueError):
    """csi-translation-lib cannot translate the volume (the message is the library's)."""


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """One in-tree volume plugin with CSI migration logic."""

    name: str
    """The in-tree plugin's name (``kubernetes.io/aws-ebs``), also a StorageClass provisioner."""
    driver: str
    """The CSI driver that supersedes it (``ebs.csi.aws.com``)."""
    source: str
    """The volume source field it serves, in a pod's volume and in a PV's spec (``awsElasticBlockStore``)."""


def _source(obj: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    return obj.get(field) or {}


def _aws_volume_id(kubernetes_id: str) -> str:
    """csi-translation-lib's KubernetesVolumeIDToEBSVolumeID."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id  # a bare volume id (vol-1234...)
    try:
        url = urlsplit(kubernetes_id)
    except ValueError as exc:
        raise TranslationError(f"Invalid disk name ({kubernetes_id}): {exc}") from exc
    if url.scheme != "aws":
        raise TranslationError(f"Invalid scheme for AWS volume ({kubernetes_id})")
    volume = url.path.strip("/")
    if not _AWS_VOLUME.match(volume):
        raise TranslationError(f"Invalid format for AWS volume ({kubernetes_id})")
    return volume


def _aws_handle(source: Mapping[str, Any]) -> str:
    try:
        return _aws_volume_id(str(source.get("volumeID") or ""))
    except TranslationError as exc:
        raise TranslationError(f"failed to translate Kubernetes ID to EBS Volume ID {exc}") from exc


def _gce_region(zones: list[str]) -> str:
    """csi-translation-lib's gceGetRegionFromZones."""
    regions: set[str] = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(f"zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}")
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        raise TranslationError(f"multiple or no regions gotten from zones, got: {sorted(regions)}")
    return regions.pop()


def _gce_pv_handle(pv: Mapping[str, Any]) -> str:
    disk = str(_source(pv.get("spec") or {}, "gcePersistentDisk").get("pdName") or "")
    labels = (pv.get("metadata") or {}).get("labels") or {}
    zones_label = str(labels.get(LABEL_BETA_ZONE) or labels.get(LABEL_ZONE) or "")
    zones = zones_label.split(MULTI_ZONE_DELIMITER)
    if len(zones) == 1 and zones[0]:
        return f"projects/{_UNSPECIFIED}/zones/{zones[0]}/disks/{disk}"
    if len(zones) > 1:
        try:
            region = _gce_region(zones)
        except TranslationError as exc:
            raise TranslationError(f"failed to get region from zones: {exc}") from exc
        return f"projects/{_UNSPECIFIED}/regions/{region}/disks/{disk}"
    return f"projects/{_UNSPECIFIED}/zones/{_UNSPECIFIED}/disks/{disk}"


def _azure_disk_handle(source: Mapping[str, Any]) -> str:
    kind = source.get("kind")
    if kind is not None and str(kind).lower() != "managed":
        raise TranslationError(f"kind({kind}) is not supported in csi migration")
    return str(source.get("diskURI") or "")


def _azure_account(secret_name: str) -> str:
    match = _AZURE_SECRET_NAME.search(secret_name)
    return match.group(1) if match else secret_name


def _azure_file_inline_handle(volume: Mapping[str, Any], namespace: str) -> str:
    source = _source(volume, "azureFile")
    account = _azure_account(str(source.get("secretName") or ""))
    share = str(source.get("shareName") or "")
    return f"#{account}#{share}#{volume.get('name') or ''}#{namespace or 'default'}"


def _azure_file_pv_handle(pv: Mapping[str, Any]) -> str:
    meta, spec = pv.get("metadata") or {}, pv.get("spec") or {}
    source = _source(spec, "azureFile")
    account = _azure_account(str(source.get("secretName") or ""))
    group = str((meta.get("annotations") or {}).get(_AZURE_FILE_RESOURCE_GROUP) or "")
    namespace = source.get("secretNamespace")
    if namespace is None:
        namespace = (spec.get("claimRef") or {}).get("namespace")
    if not namespace:
        raise TranslationError("could not find a secret namespace in PersistentVolumeSource or ClaimRef")
    return f"{group}#{account}#{source.get('shareName') or ''}#{meta.get('name') or ''}#{namespace}"


PLUGINS: tuple[InTreePlugin, ...] = (
    InTreePlugin(GCE_PD_PLUGIN, "pd.csi.storage.gke.io", "gcePersistentDisk"),
    InTreePlugin(AWS_EBS_PLUGIN, "ebs.csi.aws.com", "awsElasticBlockStore"),
    InTreePlugin(CINDER_PLUGIN, "cinder.csi.openstack.org", "cinder"),
    InTreePlugin(AZURE_DISK_PLUGIN, "disk.csi.azure.com", "azureDisk"),
    InTreePlugin(AZURE_FILE_PLUGIN, "file.csi.azure.com", "azureFile"),
    InTreePlugin(VSPHERE_PLUGIN, "csi.vsphere.vmware.com", "vsphereVolume"),
    InTreePlugin(PORTWORX_PLUGIN, "pxd.portworx.com", "portworxVolume"),
)
_BY_NAME = {plugin.name: plugin for plugin in PLUGINS}


def _field(name: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda source: str(source.get(name) or "")


_HANDLES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    AWS_EBS_PLUGIN: _aws_handle,
    CINDER_PLUGIN: _field("volumeID"),
    AZURE_DISK_PLUGIN: _azure_disk_handle,
    VSPHERE_PLUGIN: _field("volumePath"),
    PORTWORX_PLUGIN: _field("volumeID"),
}
"""The volume handle of a plugin's source, for the plugins whose handle depends on the source alone."""


def plugin_named(name: str) -> InTreePlugin | None:
    """IsMigratableIntreePluginByName / GetCSINameFromInTreeName: the plugin called ``name``, if migratable."""
    return _BY_NAME.get(name)


def plugin_of(source: Mapping[str, Any]) -> InTreePlugin | None:
    """CanSupportInline (``source`` a pod's volume) / CanSupport (``source`` a PV's spec): the in-tree plugin
    whose volume source is set, None for any other volume (CSI, PVC, configMap, hostPath ...)."""
    for plugin in PLUGINS:
        if source.get(plugin.source) is not None:
            return plugin
    return None


def inline_volume_handle(volume: Mapping[str, Any], namespace: str) -> tuple[InTreePlugin, str]:
    """TranslateInTreeInlineVolumeToCSI's driver and volume handle for a pod's in-tree volume (``namespace``
    is the pod's). Raises TranslationError when the library would, or when no plugin serves the volume."""
    plugin = plugin_of(volume)
    if plugin is None:
        raise TranslationError(f"could not find in-tree plugin translation logic for {volume.get('name')!r}")
    if plugin.name == AZURE_FILE_PLUGIN:
        return plugin, _azure_file_inline_handle(volume, namespace)
    if plugin.name == GCE_PD_PLUGIN:
        disk = _source(volume, plugin.source).get("pdName") or ""
        return plugin, f"projects/{_UNSPECIFIED}/zones/{_UNSPECIFIED}/disks/{disk}"
    return plugin, _HANDLES[plugin.name](_source(volume, plugin.source))


def pv_volume_handle(pv: Mapping[str, Any]) -> tuple[InTreePlugin, str]:
    """TranslateInTreePVToCSI's driver and volume handle for a PV of an in-tree plugin. Raises
    TranslationError when the library would, or when no plugin serves the PV."""
    spec = pv.get("spec") or {}
    plugin = plugin_of(spec)
    if plugin is None:
        name = (pv.get("metadata") or {}).get("name")
        raise TranslationError(f"could not find in-tree plugin translation logic for {name!r}")
    if plugin.name == AZURE_FILE_PLUGIN:
        return plugin, _azure_file_pv_handle(pv)
    if plugin.name == GCE_PD_PLUGIN:
        return plugin, _gce_pv_handle(pv)
    return plugin, _HANDLES[plugin.name](_source(spec, plugin.source))
