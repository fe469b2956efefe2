package strata.judge;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.paimon.catalog.Catalog;
import org.apache.paimon.catalog.Database;
import org.apache.paimon.catalog.Identifier;
import org.apache.paimon.catalog.PropertyChange;
import org.apache.paimon.partition.Partition;
import org.apache.paimon.schema.Schema;
import org.apache.paimon.table.FileStoreTable;
import org.apache.paimon.table.Table;
import org.apache.paimon.types.DataField;

/**
 * The catalog's own operations as session requests {"command": "catalog", "op": NAME, ...}, so a
 * catalog service (Paimon's REST catalog) is exercised through Paimon's Catalog API exactly as an
 * engine calls it. Ops and their arguments:
 *
 * <pre>
 *   list_databases | create_database name [properties] [ignore_if_exists] | get_database name
 *   alter_database name [set {k: v}] [remove [k]] | drop_database name [cascade]
 *   list_tables database | get_table table | create_table table fields [primary_keys]
 *   [partition_keys] [options] | drop_table table | rename_table from to
 *   alter_table table changes (as the write spec's "alter") | list_partitions table
 *   latest_snapshot table | list_branches table | create_branch table branch [tag]
 *   drop_branch table branch | fast_forward table branch | create_tag table tag
 *   rollback table (snapshot N | tag NAME) | mark_done table partition {k: v}
 * </pre>
 */
final class CatalogOps {

    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

    private CatalogOps() {}

    static JsonNode run(Catalog catalog, JsonNode request) throws Exception {
        String op = request.path("op").asText();
        switch (op) {
            case "list_databases":
                return strings(catalog.listDatabases());
            case "create_database":
                catalog.createDatabase(text(request, "name"), request.path("ignore_if_exists").asBoolean(false),
                        map(request.path("properties")));
                return NODES.booleanNode(true);
            case "get_database":
                return database(catalog.getDatabase(text(request, "name")));
            case "alter_database":
                catalog.alterDatabase(text(request, "name"), propertyChanges(request), false);
                return database(catalog.getDatabase(text(request, "name")));
            case "drop_database":
                catalog.dropDatabase(text(request, "name"), false, request.path("cascade").asBoolean(false));
                return NODES.booleanNode(true);
            case "list_tables":
                return strings(catalog.listTables(text(request, "database")));
            case "get_table":
                return table(catalog.getTable(id(request, "table")));
            case "create_table":
                catalog.createTable(id(request, "table"), schema(request), false);
                return table(catalog.getTable(id(request, "table")));
            case "drop_table":
                catalog.dropTable(id(request, "table"), false);
                return NODES.booleanNode(true);
            case "rename_table":
                catalog.renameTable(id(request, "from"), id(request, "to"), false);
                return NODES.booleanNode(true);
            case "alter_table":
                catalog.alterTable(id(request, "table"), PaimonJudge.schemaChanges(request.get("changes")), false);
                return table(catalog.getTable(id(request, "table")));
            case "list_partitions":
                return partitions(catalog.listPartitions(id(request, "table")));
            case "latest_snapshot":
                return catalog.loadSnapshot(id(request, "table"))
                        .map(s -> (JsonNode) NODES.objectNode().put("id", s.snapshot().id())
                                .put("recordCount", s.recordCount()).put("fileCount", s.fileCount()))
                        .orElse(NODES.nullNode());
            case "list_branches":
                return strings(catalog.listBranches(id(request, "table")));
            case "create_branch":
                catalog.createBranch(id(request, "table"), text(request, "branch"),
                        request.hasNonNull("tag") ? request.get("tag").asText() : null);
                return strings(catalog.listBranches(id(request, "table")));
            case "drop_branch":
                catalog.dropBranch(id(request, "table"), text(request, "branch"));
                return strings(catalog.listBranches(id(request, "table")));
            case "fast_forward":
                catalog.fastForward(id(request, "table"), text(request, "branch"));
                return NODES.booleanNode(true);
            case "create_tag":
                catalog.getTable(id(request, "table")).createTag(text(request, "tag"));
                return NODES.booleanNode(true);
            case "rollback":
                // Table.rollbackTo: through the catalog's rollback call, as Flink/Spark procedures
                if (request.hasNonNull("tag")) {
                    catalog.getTable(id(request, "table")).rollbackTo(text(request, "tag"));
                } else {
                    catalog.getTable(id(request, "table")).rollbackTo(request.path("snapshot").asLong());
                }
                return NODES.booleanNode(true);
            case "mark_done":
                catalog.markDonePartitions(id(request, "table"),
                        Collections.singletonList(map(request.path("partition"))));
                return NODES.booleanNode(true);
            default:
                throw new IllegalArgumentException("unknown catalog op " + op);
        }
    }

    private static String text(JsonNode request, String field) {
        JsonNode value = request.get(field);
        if (value == null || value.isNull()) {
            throw new IllegalArgumentException("catalog op " + request.path("op").asText() + " needs " + field);
        }
        return value.asText();
    }

    private static Identifier id(JsonNode request, String field) {
        return Identifier.fromString(text(request, field));
    }

    private static Map<String, String> map(JsonNode object) {
        Map<String, String> out = new LinkedHashMap<>();
        object.fields().forEachRemaining(e -> out.put(e.getKey(), e.getValue().asText()));
        return out;
    }

    private static ArrayNode strings(List<String> values) {
        ArrayNode out = NODES.arrayNode();
        values.forEach(out::add);
        return out;
    }

    private static List<PropertyChange> propertyChanges(JsonNode request) {
        List<PropertyChange> changes = new ArrayList<>();
        map(request.path("set")).forEach((k, v) -> changes.add(PropertyChange.setProperty(k, v)));
        request.path("remove").forEach(k -> changes.add(PropertyChange.removeProperty(k.asText())));
        return changes;
    }

    private static Schema schema(JsonNode request) {
        Schema.Builder schema = Schema.newBuilder();
        for (JsonNode field : request.get("fields")) {
            schema.column(field.get("name").asText(), PaimonJudge.parseType(field.get("type").asText()));
        }
        List<String> primaryKeys = new ArrayList<>();
        request.path("primary_keys").forEach(k -> primaryKeys.add(k.asText()));
        List<String> partitionKeys = new ArrayList<>();
        request.path("partition_keys").forEach(k -> partitionKeys.add(k.asText()));
        schema.primaryKey(primaryKeys);
        schema.partitionKeys(partitionKeys);
        map(request.path("options")).forEach(schema::option);
        return schema.build();
    }

    private static ObjectNode database(Database database) {
        ObjectNode out = NODES.objectNode().put("name", database.name());
        ObjectNode options = out.putObject("options");
        database.options().forEach(options::put);
        return out;
    }

    private static ObjectNode table(Table table) {
        ObjectNode out = NODES.objectNode().put("name", table.name()).put("full_name", table.fullName());
        out.put("uuid", table.uuid());
        if (table instanceof FileStoreTable) {
            out.put("path", ((FileStoreTable) table).location().toString());
            out.put("schema_id", ((FileStoreTable) table).schema().id());
        }
        ArrayNode fields = out.putArray("fields");
        for (DataField field : table.rowType().getFields()) {
            fields.addObject().put("name", field.name()).put("type", field.type().toString());
        }
        out.set("primary_keys", strings(table.primaryKeys()));
        out.set("partition_keys", strings(table.partitionKeys()));
        ObjectNode options = out.putObject("options");
        table.options().forEach(options::put);
        table.latestSnapshot().ifPresent(s -> out.put("snapshot", s.id()));
        return out;
    }

    private static ArrayNode partitions(List<Partition> partitions) {
        ArrayNode out = NODES.arrayNode();
        for (Partition partition : partitions) {
            ObjectNode one = out.addObject();
            ObjectNode spec = one.putObject("spec");
            partition.spec().forEach(spec::put);
            one.put("recordCount", partition.recordCount()).put("fileSizeInBytes", partition.fileSizeInBytes())
                    .put("fileCount", partition.fileCount());
        }
        return out;
    }
}
